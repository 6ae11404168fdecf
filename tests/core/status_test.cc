#include "core/status.h"

#include <cerrno>
#include <string>
#include <type_traits>

#include <gtest/gtest.h>

#include "core/units.h"

namespace strata {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  STRATA_ASSIGN_OR_RETURN(int h, Half(x));
  STRATA_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, PropagatesFirstErrorWithContext) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().WithContext("layer 3").ToString(), "InvalidArgument: layer 3: odd: 3");
}

// A message too long for the string's inline buffer: read after the Result is gone, it would be
// freed memory (garbled text in the main tree, heap-use-after-free under ASan).
Result<int> FailLong() { return OutOfMemoryError("device: " + std::string(200, 'x')); }

Status ReturnStatusOfATemporary() {
  STRATA_RETURN_IF_ERROR(FailLong().status());
  return Status::Ok();
}

TEST(StatusTest, TheStatusOfATemporaryResultOutlivesIt) {
  static_assert(std::is_same_v<decltype(FailLong().status()), Status>,
                "status() of a temporary Result must be a value, not a reference into it");
  const Status s = ReturnStatusOfATemporary();
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(s.message(), "device: " + std::string(200, 'x'));
  const Status& bound = FailLong().status();  // lifetime-extended
  EXPECT_EQ(bound.message(), "device: " + std::string(200, 'x'));
  EXPECT_EQ(Half(4).status().ok(), true);
}

TEST(StatusTest, TranslatesErrnoWithText) {
  Status s = ErrnoToStatus(ENOSPC, "write /x @ 0 (4 KiB)");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.sys_errno(), ENOSPC);
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  EXPECT_EQ(ErrnoToStatus(ENOENT, "open").code(), StatusCode::kNotFound);
}

TEST(UnitsTest, ParsesSizesAndRejectsGarbage) {
  EXPECT_EQ(*ParseByteSize("1M"), 1u << 20);
  EXPECT_EQ(*ParseByteSize("4KiB"), 4096u);
  EXPECT_EQ(*ParseByteSize("2g"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("13"), 13u);
  EXPECT_FALSE(ParseByteSize("1Q").ok());
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("99999999999T").ok());
  EXPECT_EQ(FormatBytes(1 << 20), "1 MiB");
  EXPECT_EQ(FormatBytes(13), "13 B");
}

}  // namespace
}  // namespace strata
