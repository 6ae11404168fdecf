// Note [Deferred reads in order] (engine/optim/step_overlap_defer.cc): the next forward gathers
// the deferred sub-groups in flat order, so with the optimizer state on NVMe the worker updates
// them in that order (the first one first, even when a later one's state is already in the
// buffers), and every state read is traced ("state read", its sub-group) in the order it goes
// out. From the Chrome trace of a few steps of the tiny Llama (stage 3, sub-groups of 100000
// elements, two state buffers, so the backward leaves several sub-groups for the next forward).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/engine/trace/trace_json.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;

double Ts(const nlohmann::json& e) { return e.at("ts").get<double>(); }
int SubGroup(const nlohmann::json& e) { return e.at("args").at("sub_group").get<int>(); }

TEST(DeferredOrderTest, DeferredSubGroupsAreUpdatedInTheOrderTheForwardGathersThem) {
  ScratchDir dir;
  const std::string trace = dir.File("trace.json");
  auto comm = testing::MakeLocalComm();
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  const std::string zero =
      "\"stage\": 3, \"sub_group_size\": 100000, \"reduce_bucket_size\": 40000, "
      "\"stage3_param_persistence_threshold\": 200, \"offload_optimizer\": {\"device\": "
      "\"nvme\", \"pin_memory\": false, \"nvme_path\": \"" +
      dir.File("opt") +
      "\", \"buffer_count\": 2}, \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}";
  Config config = testing::MakeConfig(2, 1, zero,
                                      "\"strata\": {\"trace_path\": \"" + trace +
                                          "\", \"overlap_step\": true, \"deferred_updates\": "
                                          "true},");
  EngineInit init;
  init.init_param = testing::TestInit(5);
  const testing::TokenData data = testing::RandomTokens(7, 5, 2, 16, 256);
  int64_t deferred = 0;
  {
    auto engine = Engine::Initialize(*model, config, *comm, *device, init);
    ASSERT_THAT(engine.status(), IsOk());
    testing::TrainAndGather(**engine, data, 5, 1);
    ASSERT_THAT((*engine)->Synchronize(), IsOk());
    deferred = (*engine)->deferred_sub_groups();
    ASSERT_THAT((*engine)->FlushTrace(), IsOk());
  }
  ASSERT_GT(deferred, 0) << "no sub-group was deferred: nothing to check";
  const testing::ParsedTrace t = testing::ParseTrace(trace);
  std::vector<double> defers, backwards;
  std::vector<nlohmann::json> updates;
  size_t reads = 0;
  for (const nlohmann::json& e : t.spans) {
    const std::string name = e.at("name");
    if (name == "defer updates") defers.push_back(Ts(e));
    if (name == "backward") backwards.push_back(Ts(e));
    if (name == "overlapped sub-group") updates.push_back(e);
    if (name == "state read") {
      EXPECT_GE(SubGroup(e), 0) << e.dump();
      EXPECT_GT(e.at("args").at("bytes").get<double>(), 0.0) << e.dump();
      ++reads;
    }
  }
  EXPECT_GT(reads, 0u) << "no state read traced";
  ASSERT_FALSE(defers.empty());
  std::sort(defers.begin(), defers.end());
  std::sort(backwards.begin(), backwards.end());
  std::sort(updates.begin(), updates.end(),
            [](const nlohmann::json& a, const nlohmann::json& b) { return Ts(a) < Ts(b); });
  size_t longest = 0;
  for (const double d : defers) {
    // The deferred updates: from the defer to the next backward (which settles them first).
    const auto next = std::upper_bound(backwards.begin(), backwards.end(), d);
    const double end = next == backwards.end() ? 1e300 : *next;
    std::vector<int> order;
    for (const nlohmann::json& u : updates) {
      if (Ts(u) >= d && Ts(u) < end) order.push_back(SubGroup(u));
    }
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end()))
        << "deferred sub-groups updated out of order: " << ::testing::PrintToString(order);
    longest = std::max(longest, order.size());
  }
  EXPECT_GE(longest, 2u) << "no step deferred two sub-groups or more: the order is not tested";
}

}  // namespace
}  // namespace strata
