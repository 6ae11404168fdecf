#!/usr/bin/env bash
# Installs the Debian 12 packages Strata needs, only those missing. Idempotent.
#
#   scripts/install_deps.sh            what building and running `strata` needs (scripts/run.sh)
#   scripts/install_deps.sh --tests    that plus what the test suite, the benchmarks, the Python
#                                      package and the multi-rank runs need (scripts/test.sh)
#
# Main: the compiler and build tools, and the libraries the `strata` program links (liburing,
# libaio, hwloc, oneTBB, nlohmann-json, OpenBLAS, xxHash, PCRE2 and utf8proc for the tokenizers). OpenMPI is not among them: without it
# `strata` has the local communicator only (one process; `strata launch` needs --tests' packages).
# --tests adds GoogleTest, Google Benchmark, OpenMPI, fio, clang-format, ccache, PyTorch/NumPy and
# pybind11 (the references and the Python package), python3-jinja2 (the chat-template reference),
# git, and curl + xz-utils (they fetch the oneTBB source for the TSan build,
# scripts/build_tsan_tbb.sh), nodejs + npm (the tokenizer references: scripts/install_test_refs.sh
# installs them into build/npm-refs).
# CUDA 13 + NCCL are optional and expected under /usr/local/cuda (not installed here).
set -euo pipefail
main_pkgs=(build-essential cmake ninja-build pkg-config
           liburing-dev libaio-dev libhwloc-dev libtbb-dev nlohmann-json3-dev
           libopenblas-dev libxxhash-dev libpcre2-dev libutf8proc-dev)
test_pkgs=(git clang-format libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin
           fio curl xz-utils ccache
           python3 python3-dev python3-torch python3-numpy python3-jinja2 pybind11-dev
           python3-pybind11)
# Node may come from elsewhere (nodesource, nvm): Debian's nodejs + npm only when none is on PATH.
command -v node >/dev/null || test_pkgs+=(nodejs)
command -v npm >/dev/null || test_pkgs+=(npm)
pkgs=("${main_pkgs[@]}")
case "${1:-}" in
  "") ;;
  --tests) pkgs+=("${test_pkgs[@]}") ;;
  *) echo "install_deps: unknown argument '$1' (allowed: none for the main job, --tests)" >&2
     exit 64 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "strata: installing missing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  # apt's own progress (one line per package fetched and unpacked) shows the install is moving.
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends \
    -o Dpkg::Progress-Fancy=0 "${missing[@]}"
fi
if [[ ${1:-} == --tests ]]; then
  "$(dirname "$0")/install_test_refs.sh"
fi
