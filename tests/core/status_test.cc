#include "core/status.h"

#include <cerrno>

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
