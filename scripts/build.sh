#!/usr/bin/env bash
# Configures and builds Strata into $1 (default build/) with extra CMake args after it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
launcher=()
# ccache makes the second and later build trees (sanitizer trees, a clean clone) much cheaper.
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$PWD"
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log"; exit 1; }
grep -E "^-- Strata" "$dir.configure.log" || true
cmake --build "$dir" -j "$(nproc)"
