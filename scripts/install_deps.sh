#!/usr/bin/env bash
# Installs the Debian 12 packages Strata needs, only those missing. Idempotent.
# curl + xz-utils fetch the oneTBB source for the TSan build (scripts/build_tsan_tbb.sh).
# CUDA 13 + NCCL are optional and expected under /usr/local/cuda (not installed here).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git clang-format
      liburing-dev libaio-dev libhwloc-dev libtbb-dev nlohmann-json3-dev
      libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin
      libopenblas-dev libxxhash-dev fio curl xz-utils ccache
      python3 python3-dev python3-torch python3-numpy pybind11-dev python3-pybind11)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "strata: installing missing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
