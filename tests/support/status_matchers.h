// StatusIs(code, matcher): asserts a Status (or a Result's status) has `code` and a message the
// matcher accepts, e.g. EXPECT_THAT(s, StatusIs(StatusCode::kIoError, HasSubstr("offset 4096"))).
// Error tests assert the code and the words that matter, never only `!ok()` (STYLE.md).
#pragma once

#include <ostream>
#include <string>

#include <gmock/gmock.h>

#include "core/status.h"

namespace strata {
// Lets gtest print a Status in failure messages.
inline void PrintTo(const Status& s, std::ostream* os) { *os << s.ToString(); }
// And a Result by its status (instead of its bytes).
template <typename T>
void PrintTo(const Result<T>& r, std::ostream* os) {
  *os << (r.ok() ? std::string("a value") : r.status().ToString());
}
}  // namespace strata

namespace strata::testing {

namespace internal {
inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
const Status& GetStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has code ") + std::string(StatusCodeName(code)) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher, negation)) {
  const Status& s = internal::GetStatus(arg);
  *result_listener << "whose status is " << s.ToString();
  if (s.code() != code) return false;
  return ::testing::ExplainMatchResult(message_matcher, s.message(), result_listener);
}

// Code only, any message (for the rare case where the message is checked separately).
MATCHER_P(StatusHasCode, code, std::string("has code ") + std::string(StatusCodeName(code))) {
  const Status& s = internal::GetStatus(arg);
  *result_listener << "whose status is " << s.ToString();
  return s.code() == code;
}

MATCHER(IsOk, "is OK") {
  const Status& s = internal::GetStatus(arg);
  *result_listener << "whose status is " << s.ToString();
  return s.ok();
}

}  // namespace strata::testing
