#!/usr/bin/env bash
# The main job on its embedded defaults: install what is missing, build, and tune the disk with
# aio_bench (a sweep on a scratch directory in the build tree, unless a path is given).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh build
scratch=${1:-build/aio-scratch}
mkdir -p "$scratch"
exec build/tools/aio_bench/aio_bench --path "$scratch" --sweep quick --emit-config \
  --json-out build/aio_bench.json
