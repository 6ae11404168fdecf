#!/usr/bin/env bash
# Creates a Python venv for bench/cpu_adam_vs_deepspeed/compare.py: CPU-only torch, DeepSpeed,
# and what DeepSpeed needs to JIT-build its CPU Adam op without CUDA (ninja, py-cpuinfo, a C++
# compiler, Python headers), then builds that op once and prints which SIMD path it took.
#
#   scripts/setup_deepspeed_venv.sh [VENV_DIR]     (default: $DS_VENV or /work/ds-venv)
#
# Then run the comparison with the venv's python and DS_ACCELERATOR=cpu (see the README there).
# Not part of CI. Needs PyPI and download.pytorch.org: where they cannot be reached, it falls back
# to Debian's CPU-only torch (python3-torch, older) in a --system-site-packages venv, and says
# plainly that DeepSpeed itself could not be installed (exit code 2).
set -euo pipefail

venv="${1:-${DS_VENV:-/work/ds-venv}}"
torch_index="https://download.pytorch.org/whl/cpu"

sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup_deepspeed_venv: installing Debian packages: ${missing[*]}"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
      "${missing[@]}"
  fi
}

# The op is compiled at first use by torch.utils.cpp_extension (g++, ninja, Python.h).
apt_install build-essential ninja-build python3-dev python3-venv

# Debian's python: its headers are the ones installed above, and the fallback needs its torch.
python=/usr/bin/python3

pypi_ok=1
created=0
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
  created=1
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check --retries 1 --timeout 30)
if ! "${pip[@]}" install -q --upgrade pip setuptools wheel; then
  pypi_ok=0
fi

if ((pypi_ok)) && "${pip[@]}" install -q torch --index-url "$torch_index" &&
   "${pip[@]}" install -q deepspeed py-cpuinfo ninja numpy packaging; then
  echo "setup_deepspeed_venv: installed torch (CPU) and deepspeed from the registries"
elif ((pypi_ok)); then
  echo "setup_deepspeed_venv: PyPI answered but installing torch/deepspeed failed (see above)" >&2
  exit 1
else
  echo "setup_deepspeed_venv: PyPI cannot be reached from here;" \
       "falling back to Debian's python3-torch" >&2
  apt_install python3-torch python3-cpuinfo python3-numpy
  if ((created)); then
    rm -rf "$venv"
  elif [ ! -f "$venv/pyvenv.cfg" ] || ! grep -q "include-system-site-packages = true" \
      "$venv/pyvenv.cfg"; then
    echo "setup_deepspeed_venv: $venv exists without system site packages; pass a new directory" >&2
    exit 1
  fi
  [ -x "$venv/bin/python" ] || "$python" -m venv --system-site-packages "$venv"
  pypi_ok=0
fi

# DeepSpeed picks its accelerator at import; without a GPU use the CPU one explicitly.
export DS_ACCELERATOR=cpu
"$venv/bin/python" - <<'EOF'
import torch
print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}, "
      f"threads {torch.get_num_threads()}")
EOF

if ! "$venv/bin/python" -c "import deepspeed" 2>/dev/null; then
  cat >&2 <<EOF
setup_deepspeed_venv: deepspeed is NOT installed in $venv (no PyPI here).
  compare.py can still run DeepSpeed's CPU Adam from a prebuilt op: --ds-op PATH, where PATH is
  DeepSpeed's cpu_adam op (.so) JIT-built on a machine that has the deepspeed package, e.g.
    DS_ACCELERATOR=cpu python -c "from deepspeed.ops.op_builder import CPUAdamBuilder as B; print(B().load().__file__)"
  (the op must be built against the same torch as the one in this venv).
EOF
  exit 2
fi

# Build (JIT) and load DeepSpeed's CPU Adam op once, so that the first timed step does not
# compile it, and report the SIMD width DeepSpeed chose: without py-cpuinfo and lscpu it would be
# -D__SCALAR__, i.e. no AVX at all.
"$venv/bin/python" - <<'EOF'
import deepspeed
from deepspeed.ops.op_builder import CPUAdamBuilder
b = CPUAdamBuilder()
print(f"deepspeed {deepspeed.__version__}: CPUAdamBuilder simd {b.simd_width()}, "
      f"arch {b.cpu_arch()}")
op = b.load()
print(f"cpu_adam op: {op.__file__}")
EOF
echo "setup_deepspeed_venv: ready: DS_ACCELERATOR=cpu $venv/bin/python bench/cpu_adam_vs_deepspeed/compare.py"
