#include "core/json_config.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(JsonConfigTest, UnknownKeySuggestsClosest) {
  auto j = nlohmann::json::parse(R"({"queue_depht": 8})");
  Status s = CheckKnownKeys(j, "aio", {"block_size", "queue_depth"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'aio.queue_depht'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("did you mean 'queue_depth'"), std::string::npos) << s.message();
}

TEST(JsonConfigTest, ReadsFloatWrittenIntegersAndAuto) {
  auto j = nlohmann::json::parse(R"({"a": 5e8, "b": "auto", "c": 1.5, "d": "x", "e": -1})");
  int64_t v = 7;
  ASSERT_TRUE(ReadInt(j, "z", "a", 0, INT64_MAX, &v).ok());
  EXPECT_EQ(v, 500000000);
  ASSERT_TRUE(ReadInt(j, "z", "b", 0, 10, &v).ok());
  EXPECT_EQ(v, 500000000);  // "auto" keeps the default
  EXPECT_FALSE(ReadInt(j, "z", "c", 0, 10, &v).ok());
  EXPECT_FALSE(ReadInt(j, "z", "d", 0, 10, &v).ok());
  Status s = ReadInt(j, "z", "e", 0, 10, &v);
  EXPECT_NE(s.message().find("z.e"), std::string::npos);
  std::string e = "io_uring";
  auto k = nlohmann::json::parse(R"({"aio_engine": "uring"})");
  EXPECT_FALSE(ReadEnum(k, "strata", "aio_engine", {"io_uring", "libaio", "auto"}, &e).ok());
}

}  // namespace
}  // namespace strata
