#include "aio/direct/aligned_buffer.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(AlignedBufferTest, HugePageBufferIs2MiBAlignedAndUsable) {
  auto b = AlignedBuffer::Allocate(5 << 20);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % AlignedBuffer::kHugePageBytes, 0u);
  EXPECT_GE(b->size(), size_t{5} << 20);
  for (size_t i = 0; i < b->size(); i += 4096) b->bytes()[i] = static_cast<uint8_t>(i);
  EXPECT_FALSE(b->Describe().empty());
  // THP may be refused by the kernel; when it is granted, it shows up in smaps.
  if (b->HugePageBackedBytes() == 0) GTEST_SKIP() << "kernel gave no huge pages: " << b->Describe();
  EXPECT_GT(b->HugePageBackedBytes(), 0u);
}

TEST(AlignedBufferTest, SmallPagesAndMoveSemantics) {
  AlignedBufferOptions o;
  o.huge_pages = false;
  auto b = AlignedBuffer::Allocate(10, o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
  AlignedBuffer moved = std::move(b).value();
  EXPECT_NE(moved.data(), nullptr);
  AlignedBuffer other;
  other = std::move(moved);
  EXPECT_EQ(moved.data(), nullptr);
  EXPECT_NE(other.data(), nullptr);
}

TEST(AlignedBufferTest, LockReportsWhetherItLocked) {
  AlignedBufferOptions o;
  o.lock = true;
  auto b = AlignedBuffer::Allocate(1 << 20, o);
  ASSERT_TRUE(b.ok());
  // Either locked, or (without CAP_IPC_LOCK / over the limit) pageable with a logged line.
  EXPECT_EQ(b->Describe().find(b->locked() ? "locked" : "pageable") != std::string::npos, true);
}

}  // namespace
}  // namespace strata
