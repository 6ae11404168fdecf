#!/usr/bin/env bash
# Configures and builds Strata into $1 (default build/) with extra CMake args after it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log"; exit 1; }
grep -E "^-- Strata" "$dir.configure.log" || true
cmake --build "$dir" -j "$(nproc)"
