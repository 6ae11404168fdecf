// StreamingCopy (Note [Streaming copies]): the same bytes as memcpy for sizes around and above
// the streaming threshold, every destination and source misalignment within a cache line, and
// nothing written outside the destination range.
#include "offload/device/host/streaming_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/support/test_util.h"

namespace strata::internal {
namespace {

TEST(StreamingCopyTest, CopiesExactlyTheRangeAtAnyAlignment) {
  const size_t sizes[] = {0,
                          1,
                          63,
                          4096,
                          kStreamingCopyMinBytes - 1,
                          kStreamingCopyMinBytes,
                          kStreamingCopyMinBytes + 1,
                          kStreamingCopyMinBytes + 63,
                          3 * kStreamingCopyMinBytes + 17};
  const size_t pad = 128;
  for (size_t n : sizes) {
    const std::vector<uint8_t> src = testing::RandomBytes(n + pad, testing::TestSeed() + n);
    for (size_t dst_off : {size_t{0}, size_t{1}, size_t{17}, size_t{63}}) {
      for (size_t src_off : {size_t{0}, size_t{5}, size_t{32}}) {
        std::vector<uint8_t> dst(n + 2 * pad, 0xA5);
        StreamingCopy(dst.data() + pad + dst_off, src.data() + src_off, n);
        ASSERT_EQ(0, std::memcmp(dst.data() + pad + dst_off, src.data() + src_off, n))
            << "size " << n << " dst +" << dst_off << " src +" << src_off;
        for (size_t i = 0; i < pad + dst_off; ++i) ASSERT_EQ(dst[i], 0xA5) << "before, " << i;
        for (size_t i = pad + dst_off + n; i < dst.size(); ++i) {
          ASSERT_EQ(dst[i], 0xA5) << "after, size " << n << " at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::internal
