#include "tools/aio_bench/pattern.h"

#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata::aio_bench {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kSize = 1 << 20;

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> Stamped(uint64_t size) {
  std::vector<uint8_t> v(size, 0x5A);
  Stamp(v.data(), size, 0);
  return v;
}

TEST(AioBenchPatternTest, CheckFindsTheFirstWrongBlock) {
  std::vector<uint8_t> v = Stamped(kSize);
  EXPECT_THAT(CheckStamps(v.data(), kSize, 0, "f"), IsOk());
  v[3 * kStampEvery] ^= 1;
  v[5 * kStampEvery] ^= 1;
  EXPECT_THAT(CheckStamps(v.data(), kSize, 0, "f"),
              StatusIs(StatusCode::kDataLoss,
                       AllOf(HasSubstr("verify f"), HasSubstr("offset 12288 holds the wrong"))));
  // The same bytes read at another offset are someone else's blocks.
  std::vector<uint8_t> w = Stamped(kSize);
  EXPECT_THAT(CheckStamps(w.data(), kSize, kSize, "f"),
              StatusIs(StatusCode::kDataLoss, HasSubstr("offset 1048576")));
}

TEST(AioBenchPatternTest, TellsItsOwnFilesFromForeignOnes) {
  ScratchDir dir;
  const std::string own = dir.File("own.dat"), zeros = dir.File("zeros.dat"),
                    random = dir.File("random.dat");
  WriteFile(own, Stamped(kSize));
  WriteFile(zeros, std::vector<uint8_t>(kSize, 0));
  WriteFile(random, ::strata::testing::RandomBytes(kSize, ::strata::testing::TestSeed()));
  auto o = HoldsPattern(own, kSize);
  ASSERT_THAT(o, IsOk());
  EXPECT_TRUE(*o);
  auto z = HoldsPattern(zeros, kSize);
  ASSERT_THAT(z, IsOk());
  EXPECT_FALSE(*z);
  auto r = HoldsPattern(random, kSize);
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(*r);
}

TEST(AioBenchPatternTest, ADamagedOwnFileIsStillOwn) {
  // Damage to block 0 and to a probed block in the middle: the other probes still find stamps,
  // so the verifying read runs and reports the damage as DataLoss.
  ScratchDir dir;
  std::vector<uint8_t> v = Stamped(kSize);
  for (uint64_t b : {uint64_t{0}, kSize / 2}) std::fill_n(v.begin() + b, kStampEvery, 0xEE);
  WriteFile(dir.File("damaged.dat"), v);
  auto held = HoldsPattern(dir.File("damaged.dat"), kSize);
  ASSERT_THAT(held, IsOk());
  EXPECT_TRUE(*held);
}

TEST(AioBenchPatternTest, ShortAndMissingFiles) {
  ScratchDir dir;
  WriteFile(dir.File("tiny.dat"), Stamped(100));
  auto tiny = HoldsPattern(dir.File("tiny.dat"), 100);  // no whole block: nothing to probe
  ASSERT_THAT(tiny, IsOk());
  EXPECT_FALSE(*tiny);
  EXPECT_THAT(HoldsPattern(dir.File("missing.dat"), kSize),
              StatusIs(StatusCode::kNotFound, HasSubstr("missing.dat")));
}

}  // namespace
}  // namespace strata::aio_bench
