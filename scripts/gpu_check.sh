#!/usr/bin/env bash
# gpu_check.sh: proves the GPU path on a machine with an NVIDIA GPU, in one command.
#
#   scripts/gpu_check.sh [--build-dir DIR] [--out FILE] [--skip-build]
#
# Steps (each one's command, exit code, time and log go into one JSON, default gpu_check.json):
#   1. the GPU and driver (nvidia-smi), nvcc
#   2. a -Werror build with CUDA on (scripts/build.sh DIR -DSTRATA_WITH_CUDA=ON)
#   3. the GPU tests: ctest -L gpu (the engine backend suites: optimizer kernels, optimizer state,
#      the engine's stage 0/1/2 same-math run), and every `cuda` case of the device-parameterised
#      suites (ctest -R '/cuda(_| |$)': the nn op conformance test, the offload device tests, the
#      engine backend suites). On a GPU machine a skipped `cuda` case counts as a failure: it
#      means the test did not see the GPU.
#   4. bench/train_step on the CUDA device, bench/overlap, and a short `strata train` of the 1b
#      preset on the GPU (strata.device forced to cuda) with configs/llama_nvme.json, or
#      configs/llama_zero2_cpu.json when this checkout has no llama_nvme.json (the JSON says which)
#      — each only if this checkout has it (else recorded as "not available" with the reason).
# Exit codes: 0 every step passed; 1 a step failed (see the JSON and the logs); 2 no NVIDIA GPU
# here (nothing is built or run); 64 bad usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build_dir=build-gpu
out=gpu_check.json
skip_build=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (allowed: --build-dir DIR, --out FILE, --skip-build)" >&2
       exit 64 ;;
  esac
done

# --- 0. Is there a GPU? --------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here: nvidia-smi is not installed or not on PATH. Nothing was" \
       "built or run; run this on a machine with an NVIDIA GPU and driver." >&2
  exit 2
fi
if ! smi_list=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$smi_list"; then
  echo "gpu_check: no NVIDIA GPU here: 'nvidia-smi -L' says: ${smi_list%.}. Nothing was" \
       "built or run." >&2
  exit 2
fi

python=/usr/bin/python3
[[ -x $python ]] || python=python3
logs="$(realpath -m "$build_dir")-gpu-check-logs"
mkdir -p "$logs"
steps="$logs/steps.tsv"  # name \t status \t exit \t seconds \t log \t command \t note
: >"$steps"

# record NAME STATUS EXIT SECONDS LOG NOTE COMMAND...
record() {
  local name=$1 status=$2 code=$3 secs=$4 log=$5 note=$6
  shift 6
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$code" "$secs" "$log" "$*" "$note" >>"$steps"
  echo "gpu_check: $name: $status${note:+ ($note)}"
}

# run NAME COMMAND...: runs it, logs to $logs/NAME.log, records passed/failed (with $run_note).
run() {
  local name=$1
  shift
  local log="$logs/$name.log" start end code
  start=$(date +%s)
  "$@" >"$log" 2>&1
  code=$?
  end=$(date +%s)
  record "$name" "$([[ $code == 0 ]] && echo passed || echo failed)" "$code" $((end - start)) \
    "$log" "${run_note:-}" "$@"
  return $code
}

not_available() { record "$1" not_available "" 0 "" "$2" "${@:3}"; }

# --- 1. Environment ------------------------------------------------------------------------------
run nvidia_smi nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
  --format=csv,noheader
if [[ -x /usr/local/cuda/bin/nvcc ]]; then run nvcc /usr/local/cuda/bin/nvcc --version; fi

# --- 2. Build ------------------------------------------------------------------------------------
if [[ $skip_build == 0 ]]; then
  if ! run build scripts/build.sh "$build_dir" -DSTRATA_WITH_CUDA=ON -DSTRATA_WERROR=ON; then
    echo "gpu_check: the build failed; see $logs/build.log" >&2
  fi
fi

# --- 3. GPU tests --------------------------------------------------------------------------------
if [[ -d $build_dir ]]; then
  run ctest_gpu_label ctest --test-dir "$build_dir" -L gpu --no-tests=ignore \
    --output-on-failure --output-junit "$logs/ctest_gpu_label.xml"
  run ctest_cuda_cases ctest --test-dir "$build_dir" -R '/cuda(_| |$)' --no-tests=error \
    --output-on-failure --output-junit "$logs/ctest_cuda_cases.xml"
else
  record ctest_cuda_cases failed "" 0 "" "no build directory $build_dir"
fi

# --- 4. Benchmarks and a short training run ------------------------------------------------------
train_step="$build_dir/bench/train_step/train_step"
if [[ ! -x $train_step ]]; then
  not_available train_step_cuda "$train_step was not built"
elif ! "$train_step" --help 2>&1 | grep -q -- '--device'; then
  not_available train_step_cuda "train_step has no --device flag yet (host device only)"
else
  run train_step_cuda "$train_step" --device cuda --json
fi

overlap="$build_dir/bench/overlap/overlap"
if [[ ! -x $overlap ]]; then
  not_available overlap_cuda "bench/overlap is not in this checkout or was not built"
elif ! "$overlap" --help 2>&1 | grep -q -- '--device'; then
  not_available overlap_cuda "bench/overlap has no --device flag yet"
else
  run overlap_cuda "$overlap" --device cuda --json
fi

strata="$build_dir/tools/strata/strata"
train_config=configs/llama_nvme.json
config_note=""
if [[ ! -f $train_config ]]; then
  train_config=configs/llama_zero2_cpu.json
  config_note="configs/llama_nvme.json is not in this checkout: used $train_config instead"
fi
if [[ ! -x $strata ]]; then
  not_available strata_train_1b "$strata was not built"
elif ! "$strata" --help 2>&1 | grep -qw train; then
  not_available strata_train_1b "the strata program has no 'train' subcommand yet"
elif [[ ! -f $train_config ]]; then
  not_available strata_train_1b "neither configs/llama_nvme.json nor $train_config is here"
else
  # The same config with the run pinned to the GPU (strata.device = cuda: no silent fallback to
  # the host-emulated device).
  gpu_config="$logs/$(basename "$train_config" .json)_cuda.json"
  "$python" - "$train_config" "$gpu_config" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("strata", {})["device"] = "cuda"
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  [[ -n $config_note ]] && echo "gpu_check: $config_note"
  run_note=$config_note run strata_train_1b "$strata" train --init 1b --config "$gpu_config" \
    --steps 5 --seq-len 512 --json
fi

# --- 5. The JSON ---------------------------------------------------------------------------------
"$python" - "$steps" "$out" "$logs" <<'PY'
import json, os, subprocess, sys, xml.etree.ElementTree as ET
steps_file, out, logs = sys.argv[1:4]
steps = []
for line in open(steps_file):
    name, status, code, secs, log, cmd, note = line.rstrip("\n").split("\t")
    step = {"name": name, "status": status, "command": cmd, "seconds": int(secs or 0)}
    if code: step["exit_code"] = int(code)
    if log: step["log"] = log
    if note: step["note"] = note
    junit = os.path.join(logs, name + ".xml")
    if os.path.exists(junit):
        cases = ET.parse(junit).getroot().iter("testcase")
        counts, skipped = {"passed": 0, "failed": 0, "skipped": 0}, []
        for c in cases:
            if c.find("skipped") is not None or c.get("status") in ("notrun", "disabled"):
                counts["skipped"] += 1
                skipped.append(c.get("name"))
            elif c.find("failure") is not None or c.get("status") == "fail":
                counts["failed"] += 1
            else:
                counts["passed"] += 1
        step["tests"] = counts
        if skipped:
            step["skipped_tests"] = skipped
            # On a GPU machine a skipped cuda case did not see the GPU: that is a failure.
            if name == "ctest_cuda_cases":
                step["status"] = "failed"
                step["note"] = "cuda cases skipped on a GPU machine"
    if name in ("nvidia_smi", "train_step_cuda", "overlap_cuda", "strata_train_1b") and log \
            and os.path.exists(log):
        step["output"] = open(log).read()[-4000:]
    steps.append(step)
try:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
except OSError:
    commit = ""
result = {
    "tool": "scripts/gpu_check.sh",
    "commit": commit,
    "measured_on_gpu": True,
    "ok": all(s["status"] in ("passed", "not_available") for s in steps),
    "steps": steps,
}
with open(out, "w") as f:
    json.dump(result, f, indent=2)
bad = [s["name"] + (" (" + s["note"] + ")" if "note" in s else "") for s in steps
       if s["status"] not in ("passed", "not_available")]
print("gpu_check: wrote", out, "-", "all passed" if not bad else "FAILED: " + ", ".join(bad))
sys.exit(0 if result["ok"] else 1)
PY
