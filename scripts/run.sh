#!/usr/bin/env bash
# The main job on its embedded defaults: install what is missing, build, then fine-tune the `small`
# Llama preset ZeRO-Infinity style with configs/llama_nvme.json (stage 3, parameters and optimizer
# state off the device, the optimizer's fp32 state on NVMe under build/nvme-swap, the emulated
# device capped far below the model's training state) on the text file the project ships. It
# prints the per-tier memory table (planned vs peak), the loss and the step's breakdown every
# `steps_per_print`, then saves a checkpoint and exports it in Hugging Face layout.
#
#   scripts/run.sh [STEPS] [OUT_DIR]     defaults: 80 steps (about a minute), build/main-job
#
# A first run installs only the packages building and running `strata` needs
# (scripts/install_deps.sh without --tests) and builds only the `strata` program: no tests,
# benchmarks or Python package, and CUDA code only when this machine can run it (an NVIDIA driver
# and a device), for its own GPU only. scripts/test.sh builds everything, the CUDA path included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
# A GPU can run CUDA code here: nvidia-smi lists one, or the device node and the driver library
# are present.
cuda=(-DSTRATA_WITH_CUDA=OFF)
if { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; } ||
   { [[ -e /dev/nvidia0 ]] && ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; }; then
  cuda=(-DSTRATA_WITH_CUDA=AUTO -DCMAKE_CUDA_ARCHITECTURES=native)
  echo "strata: an NVIDIA GPU is here: CUDA code is built (if /usr/local/cuda has nvcc)"
else
  echo "strata: no NVIDIA GPU here: the CUDA code is not built (the host-emulated device runs)"
fi
# Release at -O2 without debug info: the same code as scripts/test.sh's RelWithDebInfo tree, about
# a quarter less compile time. A unity build (CMAKE_UNITY_BUILD: each library's files compiled a
# few at a time in one translation unit, so the shared headers are parsed and their templates
# instantiated once per batch): 57 compiles instead of 187, about half the CPU time (README.md,
# "First run").
scripts/build.sh build --target strata -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF \
  -DSTRATA_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
  -DCMAKE_UNITY_BUILD=ON "${cuda[@]}"
steps=${1:-80}
out=${2:-build/main-job}
rm -rf "$out"
mkdir -p "$out"
exec build/tools/strata/strata train --config configs/llama_nvme.json --init small \
  --steps "$steps" --save "$out/checkpoints" --export "$out/export"
