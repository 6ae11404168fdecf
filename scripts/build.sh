#!/usr/bin/env bash
# Configures and builds Strata into DIR (default build/): every target, or only those named with
# --target (repeatable, before the CMake arguments); extra CMake arguments follow.
#
#   scripts/build.sh [DIR] [--target NAME]... [CMAKE_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
targets=()
while [[ ${1:-} == --target ]]; do
  targets+=(--target "${2:?--target needs a target name}")
  shift 2
done
launcher=()
# ccache makes the second and later build trees (sanitizer trees, a clean clone) much cheaper.
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$PWD"
  # With -g, ccache hashes the working directory unless told not to: a clean clone or a worktree
  # elsewhere would then miss every entry another tree left (debug info keeps relative paths).
  export CCACHE_NOHASHDIR=1
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log"; exit 1; }
grep -E "^-- Strata" "$dir.configure.log" || true
# Ninja's [done/total] line is the build's progress.
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
