// StepBreakdown: sums field-wise, prints the parts that are not zero, and its JSON has them all.
#include "engine/base/step_breakdown.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StepBreakdownTest, SumsPrintsAndSerialisesItsParts) {
  StepBreakdown a;
  a.total_ms = 100;
  a.forward_ms = 20;
  a.step_ms = 50;
  a.cpu_adam_ms = 30;
  a.io_wait_ms = 5;
  a.overlapped_adam_ms = 7;
  a.nvme_read_bytes = 3 << 20;
  StepBreakdown b = a;
  b.backward_ms = 40;
  b.h2d_bytes = 1 << 20;
  b.forward_h2d_bytes = 1 << 19;
  b.grad_region_write_bytes = 1 << 18;
  a += b;
  EXPECT_EQ(a.total_ms, 200);
  EXPECT_EQ(a.backward_ms, 40);
  EXPECT_EQ(a.nvme_read_bytes, uint64_t{6} << 20);
  const std::string s = a.ToString();
  EXPECT_THAT(s, HasSubstr("step 200.0 ms"));
  EXPECT_THAT(s, HasSubstr("step 100.0 (adam 60.0, io wait 10.0)"));
  EXPECT_THAT(s, HasSubstr("nvme r 6"));
  EXPECT_THAT(s, HasSubstr("adam in bwd 14.0"));
  EXPECT_THAT(s, Not(HasSubstr("comm"))) << "zero parts are left out";
  const auto j = nlohmann::json::parse(a.ToJson());
  EXPECT_EQ(j.at("cpu_adam_ms").get<double>(), 60);
  EXPECT_EQ(j.at("nvme_read_bytes").get<uint64_t>(), uint64_t{6} << 20);
  EXPECT_EQ(j.at("collective_bytes").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("overlapped_adam_ms").get<double>(), 14);
  EXPECT_EQ(j.at("forward_h2d_bytes").get<uint64_t>(), uint64_t{1} << 19);
  EXPECT_EQ(j.at("grad_region_write_bytes").get<uint64_t>(), uint64_t{1} << 18);
  EXPECT_EQ(j.at("grad_region_read_bytes").get<uint64_t>(), 0u);
  EXPECT_EQ(j.size(), 18u);
}

}  // namespace
}  // namespace strata
