// The NVMe bytes of a stage-3 step with the optimizer state on NVMe and the step overlapped with
// backward (issue 40's minimum bytes), against counts derived here from the sizes alone: the
// optimizer's swap chunks (strata.swap_chunk_bytes) of C elements are the sub-groups, each state
// 3 parts of 4 C bytes (4 KiB aligned); offload_optimizer.buffer_count buffers of the largest
// state hold that many states. With the states of a step not all fitting, a step must read (and
// write) at least what the buffers cannot hold; keeping the states the last step left (Note
// [Resident states stay] in engine/nvme/optimizer_nvme_read_ahead.cc) it reads one state more than
// that at most: the first state it needs takes the room of the one it needs last. Before, every
// state was read and written every step. The NVMe gradient region (strata.nvme_grad_chunk, chunks
// of C elements: one per sub-group) writes the gradients of the sub-groups whose states are not
// in the buffers; those of the states kept there are read from memory by their updates (Note
// [Gradients of resident states] in engine/nvme/grad_region.cc). Before, it wrote the whole
// gradient every step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;

// Elements per swap chunk and per gradient chunk: a multiple of the norm's 4096-element chunks.
// 172032: the tiny Llama's 853120 elements in 5 chunks, states of 2064384 bytes (under 2 MiB).
constexpr uint64_t kChunk = 4096 * 42;
constexpr int kBuffers = 3;
constexpr int kSteps = 7;
constexpr int kFirstSteady = 3;  // the first steps fill the buffers

// A state's bytes on NVMe: master, exp_avg and exp_avg_sq, each 4 KiB aligned.
uint64_t StateBytes(uint64_t numel) { return 3 * ((numel * 4 + 4095) / 4096 * 4096); }

struct StepBytes {
  uint64_t state_read = 0, state_written = 0, grads_written = 0, grads_read = 0;
};

std::vector<StepBytes> RunSteps(const std::string& dir, uint64_t grad_chunk_bytes, size_t* numel) {
  auto comm = testing::MakeLocalComm();
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  const std::string zero =
      "\"stage\": 3, \"sub_group_size\": 1000000000, \"reduce_bucket_size\": 40000, "
      "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}, "
      "\"offload_optimizer\": {\"device\": \"nvme\", \"pin_memory\": false, \"nvme_path\": \"" +
      dir + "\", \"buffer_count\": " + std::to_string(kBuffers) + "}";
  const std::string strata =
      "\"strata\": {\"overlap_step\": true, \"swap_chunk_bytes\": " + std::to_string(12 * kChunk) +
      ", \"nvme_grad_chunk\": " + std::to_string(grad_chunk_bytes) + "},";
  // No clipping: the overlapped step's updates are final (no speculation).
  Config config = testing::MakeConfig(2, 1, zero, strata, 1, 0.0);
  EngineInit init;
  init.init_param = testing::TestInit(3);
  const testing::TokenData data = testing::RandomTokens(11, kSteps, 2, 16, 256);
  auto engine = Engine::Initialize(*model, config, *comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk());
  if (!engine.ok()) return {};
  Engine& e = **engine;
  *numel = e.layout().partition_numel();
  std::vector<StepBytes> out;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_THAT(e.Forward(data.Batch(static_cast<size_t>(s))), IsOk());
    EXPECT_THAT(e.Backward(), IsOk());
    EXPECT_THAT(e.Step(), IsOk());
    const StepBreakdown& b = e.last_breakdown();
    out.push_back({b.nvme_read_bytes - b.grad_region_read_bytes,
                   b.nvme_write_bytes - b.grad_region_write_bytes, b.grad_region_write_bytes,
                   b.grad_region_read_bytes});
  }
  EXPECT_THAT(e.Synchronize(), IsOk());
  EXPECT_GT(e.overlapped_sub_groups() + e.deferred_sub_groups(), 0);
  return out;
}

// The sub-groups' states (swap chunks of kChunk elements, the last one short), the buffers'
// bytes (kBuffers x the largest), and what the buffers cannot hold.
struct Derived {
  uint64_t total = 0, largest = 0, buffers = 0, not_held = 0;
};
Derived Derive(size_t numel) {
  Derived d;
  for (uint64_t b = 0; b < numel; b += kChunk) {
    const uint64_t s = StateBytes(std::min<uint64_t>(kChunk, numel - b));
    d.total += s;
    d.largest = std::max(d.largest, s);
  }
  // Each buffer as the pinned pool rounds it: to 4 KiB, or to 2 MiB from 2 MiB on.
  const uint64_t align = d.largest >= (uint64_t{2} << 20) ? uint64_t{2} << 20 : 4096;
  d.buffers = kBuffers * ((d.largest + align - 1) / align * align);
  d.not_held = d.total - std::min(d.total, d.buffers);
  return d;
}

// The steady steps' bytes together: which step a read or write counts in depends on timing (the
// next forward's deferred updates count in the step after; a read-ahead may come before or after
// a step's end), how many a step moves on average does not.
StepBytes Steady(const std::vector<StepBytes>& steps) {
  StepBytes sum;
  for (size_t s = kFirstSteady; s < steps.size(); ++s) {
    sum.state_read += steps[s].state_read;
    sum.state_written += steps[s].state_written;
    sum.grads_written += steps[s].grads_written;
    sum.grads_read += steps[s].grads_read;
  }
  return sum;
}
constexpr uint64_t kSteady = kSteps - kFirstSteady;

TEST(NvmeBytesTest, AStepReadsAndWritesOnlyTheStatesTheBuffersCannotKeep) {
  ScratchDir dir;
  size_t numel = 0;
  const std::vector<StepBytes> steps = RunSteps(dir.File("opt"), 0, &numel);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  const Derived d = Derive(numel);
  ASSERT_GT(d.not_held, 0u) << "every state fits: nothing to test";
  // A step: at least what the buffers cannot hold, at most one state more (one step's worth of
  // slack for the steps at the ends of the window); every state every step is well above.
  const uint64_t most = (kSteady + 1) * (d.not_held + d.largest);
  ASSERT_LT(most, kSteady * d.total) << "the bound does not tell keeping from not";
  const StepBytes b = Steady(steps);
  EXPECT_EQ(b.grads_written + b.grads_read, 0u);  // no gradient region
  EXPECT_GE(b.state_read, (kSteady - 1) * d.not_held);
  EXPECT_LE(b.state_read, most);
  EXPECT_GE(b.state_written, (kSteady - 1) * d.not_held);
  EXPECT_LE(b.state_written, most);
}

TEST(NvmeBytesTest, TheGradientRegionWritesOnlyTheGradientsOfStatesNotKept) {
  ScratchDir dir;
  size_t numel = 0;
  const std::vector<StepBytes> steps = RunSteps(dir.File("opt"), 4 * kChunk, &numel);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  const Derived d = Derive(numel);
  const uint64_t most = (kSteady + 1) * (d.not_held + d.largest);
  const StepBytes b = Steady(steps);
  EXPECT_LE(b.state_read, most);
  EXPECT_LE(b.state_written, most);
  // A sub-group's gradients (4 B an element) are a third of its state (12 B): the region writes
  // those of the states not kept, a third of the state bound; the whole gradient every step is
  // well above.
  const uint64_t grads_most = most / 3;
  ASSERT_LT(grads_most, kSteady * numel * 4) << "the bound does not tell holding from not";
  EXPECT_LE(b.grads_written, grads_most);
  EXPECT_LE(b.grads_read, b.grads_written);
}

}  // namespace
}  // namespace strata
