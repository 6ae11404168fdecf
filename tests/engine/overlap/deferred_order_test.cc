// Note [Deferred reads in order] (engine/overlap/step_overlap_defer.cc): the next forward gathers
// the deferred sub-groups in flat order, so with the optimizer state on NVMe the worker updates
// them in that order (the first one first, even when a later one's state is already in the
// buffers), and every state read is traced ("state read", its sub-group) in the order it goes
// out. From the Chrome trace of a few steps of the tiny Llama (stage 3, sub-groups of 100000
// elements, two state buffers, so the backward leaves several sub-groups for the next forward).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>
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

// The tiny Llama at stage 3, sub-groups of 100000 elements, the optimizer state on NVMe in two
// buffers (so the backward leaves several sub-groups for the next forward), deferred updates on,
// traced to `trace`; five batches.
class DeferredOrderTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<Engine>> Start() {
    const std::string zero =
        "\"stage\": 3, \"sub_group_size\": 100000, \"reduce_bucket_size\": 40000, "
        "\"stage3_param_persistence_threshold\": 200, \"offload_optimizer\": {\"device\": "
        "\"nvme\", \"pin_memory\": false, \"nvme_path\": \"" +
        dir.File("opt") +
        "\", \"buffer_count\": 2}, \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}";
    const Config config =
        testing::MakeConfig(2, 1, zero,
                            "\"strata\": {\"trace_path\": \"" + trace +
                                "\", \"overlap_step\": true, \"deferred_updates\": true},");
    EngineInit init;
    init.init_param = testing::TestInit(5);
    return Engine::Initialize(*model, config, *comm, *device, init);
  }
  ScratchDir dir;
  const std::string trace = dir.File("trace.json");
  std::unique_ptr<Communicator> comm = testing::MakeLocalComm();
  std::unique_ptr<Device> device = testing::MakeHostDevice();
  std::unique_ptr<llama::LlamaForCausalLM> model =
      testing::MakeTinyModel(device.get(), DType::kFloat32);
  const testing::TokenData data = testing::RandomTokens(7, 5, 2, 16, 256);
};

TEST_F(DeferredOrderTest, DeferredSubGroupsAreUpdatedInTheOrderTheForwardGathersThem) {
  int64_t deferred = 0;
  {
    auto engine = Start();
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

// Note [Wanted across the phases] (engine/overlap/step_overlap_worker.cc): once the forward's
// deferred updates are done, the worker reads ahead the states the next phases update (the
// sub-groups this step updated, wanted again next), instead of leaving the disk idle until the next
// backward begins. The test pauses between each Forward and Backward, so the read-ahead has the
// time it would have while a larger model's forward runs; before, nothing was wanted then and no
// state was read until the backward. Two state buffers for more sub-groups: some next state is
// always on NVMe only.
TEST_F(DeferredOrderTest, TheNextPhasesStatesAreReadDuringTheForwardOnceTheDeferredUpdatesAreDone) {
  int sub_groups = 0;
  {
    auto engine = Start();
    ASSERT_THAT(engine.status(), IsOk());
    for (size_t s = 0; s < 5; ++s) {
      ASSERT_THAT((*engine)->Forward(data.Batch(s)), IsOk());
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ASSERT_THAT((*engine)->Backward(), IsOk());
      ASSERT_THAT((*engine)->Step(), IsOk());
    }
    ASSERT_THAT((*engine)->Synchronize(), IsOk());
    ASSERT_GT((*engine)->deferred_sub_groups(), 0) << "no sub-group was deferred";
    ASSERT_THAT((*engine)->FlushTrace(), IsOk());
  }
  const testing::ParsedTrace t = testing::ParseTrace(trace);
  std::vector<double> defers, backwards;
  std::vector<nlohmann::json> updates, reads;
  for (const nlohmann::json& e : t.spans) {
    const std::string name = e.at("name");
    if (name == "defer updates") defers.push_back(Ts(e));
    if (name == "backward") backwards.push_back(Ts(e));
    if (name == "overlapped sub-group") {
      updates.push_back(e);
      sub_groups = std::max(sub_groups, SubGroup(e) + 1);
    }
    if (name == "state read") reads.push_back(e);
  }
  ASSERT_GT(sub_groups, 2) << "the two buffers hold every state: nothing to read ahead";
  std::sort(defers.begin(), defers.end());
  std::sort(backwards.begin(), backwards.end());
  // For each pause: the sub-group updated first after it (by the next backward, or else by the
  // next deferral) must not wait for a read issued after the pause (before or during its
  // update): its state is in the buffers or was read during it. And in some pause that read is seen
  // (else nothing was tested).
  size_t checked = 0, read_in_pause = 0;
  std::string late;
  for (const double d : defers) {
    const auto next = std::upper_bound(backwards.begin(), backwards.end(), d);
    if (next == backwards.end()) continue;
    const double end = *next;
    double deferred_end = -1;
    const nlohmann::json* first_after = nullptr;
    for (const nlohmann::json& u : updates) {
      if (Ts(u) >= d && Ts(u) < end) {
        deferred_end = std::max(deferred_end, Ts(u) + u.at("dur").get<double>());
      }
      if (Ts(u) >= end && (first_after == nullptr || Ts(u) < Ts(*first_after))) first_after = &u;
    }
    if (deferred_end < 0 || first_after == nullptr) continue;
    ++checked;
    const int f = SubGroup(*first_after);
    for (const nlohmann::json& r : reads) {
      if (SubGroup(r) != f) continue;
      if (Ts(r) >= deferred_end && Ts(r) < end) ++read_in_pause;
      if (Ts(r) >= end && Ts(r) < Ts(*first_after) + first_after->at("dur").get<double>()) {
        late += " sub-group " + std::to_string(f) + " read " + std::to_string((Ts(r) - end) / 1e3) +
                " ms after the next backward began;";
      }
    }
  }
  ASSERT_GT(checked, 0u) << "no forward ran deferred updates";
  EXPECT_EQ(late, "") << "the next phase's first state was not read ahead during the forward";
  EXPECT_GT(read_in_pause, 0u)
      << "no next phase's first state was read during a pause: nothing was tested";
}

}  // namespace
}  // namespace strata
