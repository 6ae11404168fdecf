#!/usr/bin/env bash
# install_test.sh BUILD_DIR SCRATCH: `cmake --install` of the build tree into SCRATCH/prefix gives
# bin/strata, the example configs and the docs; the installed strata trains without --data (the
# shipped text is built in) from a working directory outside any checkout.
set -euo pipefail
build=$1 scratch=$2
rm -rf "$scratch"
mkdir -p "$scratch/work"
cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log"
for f in bin/strata share/strata/configs/llama_zero2_cpu.json share/strata/configs/llama_nvme.json \
         share/doc/strata/README.md share/doc/strata/architecture.md; do
  [[ -e $scratch/prefix/$f ]] || { echo "FAIL: $f was not installed"; cat "$scratch/install.log"; exit 1; }
done
cd "$scratch/work"
out=$("$scratch/prefix/bin/strata" train --config "$scratch/prefix/share/strata/configs/llama_zero2_cpu.json" \
  --init tiny --steps 2 --seq-len 32 --json)
grep -q '"loss' <<<"$out" || { echo "FAIL: no loss in the installed strata's output:"; echo "$out"; exit 1; }
echo "install_test: passed"
