#include "tokenizers/text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizers/text/utf8.h"

namespace strata::tokenizers::internal {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {
// One match-data block per thread and pattern shape, reused across calls (no allocation per
// piece on the hot path). PCRE2 sizes match data from the pattern; 32 pairs covers the
// tokenizer.json patterns (capture groups are not used for splitting).
// The JIT stack grows to 8 MiB, so long whitespace runs under `\s+(?!\S)` still match.
struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(32, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  MatchData() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
  ~MatchData() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(md);
  }
};
MatchData& ThreadMatchData() {
  thread_local MatchData data;
  return data;
}
Status ResourceError(size_t pos, const char* msg) {
  return InvalidArgumentError("regex match failed at byte " + std::to_string(pos) + ": " + msg);
}
}  // namespace

Result<Regex> Regex::Compile(std::string_view pattern, bool literal) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  // PCRE2_LITERAL allows UTF but not UCP (meaningless without metacharacters).
  const uint32_t options =
      literal ? PCRE2_LITERAL | PCRE2_UTF : PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                             &err, &err_offset, nullptr);
  if (code->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return InvalidArgumentError("regex does not compile at offset " + std::to_string(err_offset) +
                                ": " + reinterpret_cast<const char*>(msg));
  }
  code->jit = pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(code));
}

Result<std::vector<std::pair<size_t, size_t>>> Regex::FindAll(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  MatchData& data = ThreadMatchData();
  pcre2_match_data* md = data.md;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, s.size(), pos, 0, md, data.ctx)
                        : pcre2_match(code_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md,
                                      nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      return ResourceError(pos, reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {
      if (b >= s.size()) break;
      pos = b + Utf8SeqLen(static_cast<unsigned char>(s[b]));
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
  return out;
}

Result<std::string> Regex::ReplaceAll(std::string_view s, std::string_view content) const {
  STRATA_ASSIGN_OR_RETURN(const auto matches, FindAll(s));
  std::string out;
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    out.append(s.substr(last, b - last));
    out.append(content);
    last = e;
  }
  out.append(s.substr(last));
  return out;
}

}  // namespace strata::tokenizers::internal
