#include "aio/aio_config.h"

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(AioConfigTest, DefaultsMatchDeepSpeed) {
  AioOptions o;
  ASSERT_TRUE(ApplyAioSection(nlohmann::json::object(), &o).ok());
  EXPECT_EQ(o.block_size, 1u << 20);
  EXPECT_EQ(o.queue_depth, 8);
  EXPECT_EQ(o.thread_count, 1);
  EXPECT_FALSE(o.single_submit);
  EXPECT_TRUE(o.overlap_events);
}

TEST(AioConfigTest, ReadsKeysAndOldThreadCountName) {
  AioOptions o;
  auto j = nlohmann::json::parse(
      R"({"block_size": 4194304, "queue_depth": 32, "thread_count": 2, "single_submit": true})");
  ASSERT_TRUE(ApplyAioSection(j, &o).ok());
  EXPECT_EQ(o.block_size, 4u << 20);
  EXPECT_EQ(o.queue_depth, 32);
  EXPECT_EQ(o.thread_count, 2);
  EXPECT_TRUE(o.single_submit);
  auto round = AioSectionJson(o);
  AioOptions p;
  ASSERT_TRUE(ApplyAioSection(round, &p).ok());
  EXPECT_EQ(p.queue_depth, 32);
  EXPECT_EQ(p.thread_count, 2);
}

TEST(AioConfigTest, RejectsUnknownBothNamesAndBadValues) {
  AioOptions o;
  EXPECT_THAT(
      ApplyAioSection(nlohmann::json::parse(R"({"queue_dept": 4})"), &o),
      StatusIs(StatusCode::kInvalidArgument,
               AllOf(HasSubstr("aio.queue_dept"), HasSubstr("did you mean 'queue_depth'"))));
  EXPECT_THAT(ApplyAioSection(
                  nlohmann::json::parse(R"({"thread_count": 1, "intra_op_parallelism": 2})"), &o),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("intra_op_parallelism"), HasSubstr("thread_count"))));
  EXPECT_THAT(ApplyAioSection(nlohmann::json::parse(R"({"block_size": 1000})"), &o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("aio.block_size")));
  EXPECT_THAT(ApplyAioSection(nlohmann::json::parse(R"({"single_submit": "false"})"), &o),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("aio.single_submit"), HasSubstr("true or false"))));
}

TEST(AioConfigTest, ReadsStrataEngineKeys) {
  AioOptions o;
  ASSERT_TRUE(ApplyStrataAioKeys(nlohmann::json::parse(R"({"aio_engine": "libaio",
      "aio_allow_buffered": true, "checksums": true})"),
                                 &o)
                  .ok());
  EXPECT_EQ(o.engine, IoEngineKind::kLibaio);
  EXPECT_TRUE(o.allow_buffered);
  EXPECT_THAT(ApplyStrataAioKeys(nlohmann::json::parse(R"({"aio_engine": "spdk"})"), &o),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("strata.aio_engine"), HasSubstr("io_uring, libaio, auto"))));
}

TEST(AioConfigTest, ExampleConfigsHaveValidAioSections) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(STRATA_SOURCE_DIR "/configs")) {
    if (e.path().extension() != ".json") continue;
    ++files;
    std::ifstream in(e.path());
    auto j = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << e.path();
    AioOptions o;
    if (j.contains("aio")) {
      EXPECT_TRUE(ApplyAioSection(j["aio"], &o).ok()) << e.path();
    }
    if (j.contains("strata")) {
      EXPECT_TRUE(ApplyStrataAioKeys(j["strata"], &o).ok()) << e.path();
    }
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace strata
