#!/usr/bin/env bash
# The main job on its embedded defaults: install what is missing, build, then fine-tune the `small`
# Llama preset ZeRO-Infinity style with configs/llama_nvme.json (stage 3, parameters and optimizer
# state off the device, the optimizer's fp32 state on NVMe under build/nvme-swap, the emulated
# device capped far below the model's training state) on the text file the project ships. It
# prints the per-tier memory table (planned vs peak), the loss and the step's breakdown every
# `steps_per_print`, then saves a checkpoint and exports it in Hugging Face layout.
#
#   scripts/run.sh [STEPS] [OUT_DIR]     defaults: 80 steps (about a minute), build/main-job
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh build
steps=${1:-80}
out=${2:-build/main-job}
rm -rf "$out"
mkdir -p "$out"
exec build/tools/strata/strata train --config configs/llama_nvme.json --init small \
  --steps "$steps" --save "$out/checkpoints" --export "$out/export"
