#!/usr/bin/env bash
# check_layers_selftest.sh SOURCE_DIR SCRATCH: scripts/check_layers.sh on small trees under the
# repository's cmake/layers.txt - a clean tree passes; a tree with an include up a layer, one
# sideways between peer layers, one up a room, one sideways between peer rooms inside a room
# (engine/config's) and one up a room inside a layer's room (nn/modules') fails, naming each
# file:line and include.
set -uo pipefail
src=$1 scratch=$2
rm -rf "$scratch"
mkdir -p "$scratch/cmake" "$scratch/core" "$scratch/engine/zero" "$scratch/engine/optim" \
  "$scratch/models/llama" "$scratch/nn/modules/layers" "$scratch/nn/modules/lm" \
  "$scratch/engine/config/reader" "$scratch/engine/config/deepspeed" "$scratch/engine/config/strata"
cp "$src/cmake/layers.txt" "$scratch/cmake/"
status=0
check() { "$src/scripts/check_layers.sh" --root "$scratch" >"$scratch/out.txt" 2>&1; }
expect() {  # expect PATTERN: the last run's output has it
  grep -qF -- "$1" "$scratch/out.txt" || { echo "FAIL: no '$1' in:"; cat "$scratch/out.txt"; status=1; }
}

printf '#include "core/status.h"\n' >"$scratch/engine/zero/hooks.cc"
printf '#include "engine/zero/hooks.h"\n#include "core/status.h"\n' >"$scratch/engine/optim/step.cc"
printf '#include "nn/modules/layers/module.h"\n#include <vector>\n' >"$scratch/models/llama/model.cc"
printf '#include "strata/config.h"\n' >"$scratch/core/status.h"
printf '#include "engine/config/reader/section_reader.h"\n' >"$scratch/engine/config/strata/s.cc"
printf '#include "engine/config/strata/s.h"\n#include "engine/config/deepspeed/z.h"\n' \
  >"$scratch/engine/config/config.cc"
printf '#include "engine/config/config.h"\n' >"$scratch/engine/zero/store.cc"
printf '#include "nn/modules/layers/linear.h"\n' >"$scratch/nn/modules/lm/head.cc"
check && rc=0 || rc=$?
[[ $rc == 0 ]] || { echo "FAIL: a clean tree exits $rc"; cat "$scratch/out.txt"; status=1; }

printf '// x\n#include "engine/engine.h"\n' >>"$scratch/core/status.h"
printf '#include "engine/optim/step.h"\n' >>"$scratch/engine/zero/hooks.cc"
printf '#include "engine/engine.h"\n' >>"$scratch/models/llama/model.cc"
printf '#include "engine/config/deepspeed/z.h"\n' >>"$scratch/engine/config/strata/s.cc"
printf '#include "engine/config/config.h"\n' >"$scratch/engine/config/reader/r.cc"
printf '#include "nn/modules/lm/causal_lm.h"\n' >"$scratch/nn/modules/layers/linear.cc"
check && rc=0 || rc=$?
[[ $rc == 1 ]] || { echo "FAIL: a tree with bad includes exits $rc (want 1)"; status=1; }
expect 'core/status.h:3: includes "engine/engine.h": layer engine is not below layer core'
expect 'engine/zero/hooks.cc:2: includes "engine/optim/step.h": room engine/optim is not below room engine/zero'
expect 'models/llama/model.cc:3: includes "engine/engine.h": layer engine is not below layer models'
expect 'engine/config/strata/s.cc:2: includes "engine/config/deepspeed/z.h": room engine/config/deepspeed is not below room engine/config/strata (cmake/layers.txt: engine/config)'
expect 'engine/config/reader/r.cc:1: includes "engine/config/config.h": room engine/config is not below room engine/config/reader (cmake/layers.txt: engine/config)'
expect 'nn/modules/layers/linear.cc:1: includes "nn/modules/lm/causal_lm.h": room nn/modules/lm is not below room nn/modules/layers (cmake/layers.txt: nn/modules)'
expect 'check_layers: 6 include(s)'
[[ $status == 0 ]] && echo "check_layers_selftest: passed"
exit $status
