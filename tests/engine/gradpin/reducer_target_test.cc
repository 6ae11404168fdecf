// GradReducer (engine/zero/grad/grad_reducer.h) into a GradTarget (engine/zero/grad/grad_target.h):
// the NVMe gradient region as the reducer's host target gets, over two accumulated backward passes,
// the same bits a host partition gets from the same reductions (a plain float reference checks the
// partition), with its norm taken as the gradients arrived.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "engine/base/partition.h"
#include "engine/comm/local_communicator.h"
#include "engine/nvme/grad_region.h"
#include "engine/zero/grad/grad_reducer.h"
#include "offload/device/host/host_device.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;

TEST(GradReducerTargetTest, RegionTargetGetsTheHostPartitionsBitsOverAccumulatedPasses) {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::vector<size_t> numels = {3000, 17, 9000, 64, 5, 7777};
  auto device = std::move(CreateHostDevice({})).value();
  auto comm = internal::CreateLocalCommunicator();
  Stream compute = device->CreateStream().value();
  const PartitionLayout layout = PartitionLayout::Create(numels, 1, 0, 16).value();
  const size_t n = layout.partition_numel();
  ScratchDir dir;
  auto aio = std::move(AioHandle::Create({})).value();
  GradRegionOptions ro;
  ro.nvme_paths = {dir.path().string()};
  ro.chunk_numel = 4096;
  ro.buffer_count = 1;  // every chunk switch writes one out and reads one back
  ro.pin_memory = false;
  auto region = std::move(GradRegion::Create(n, ro, aio.get())).value();
  std::vector<float> host(n, 0.0f), want(n, 0.0f);
  std::vector<std::unique_ptr<GradReducer>> reducers;
  for (const bool to_region : {false, true}) {
    GradReducerOptions o;
    o.comm = comm.get();
    o.device = device.get();
    o.compute = compute;
    o.bucket_numel = 10'000;
    o.bucket_one_rank = true;
    o.layout = &layout;
    o.pin_memory = false;
    if (to_region) {
      o.host_target = region.get();
    } else {
      o.host_partition = host.data();
    }
    reducers.push_back(std::move(GradReducer::Create(o)).value());
  }
  std::vector<void*> slots;
  for (size_t k : numels) slots.push_back(device->Allocate(k * sizeof(float)).value());
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& r : reducers) ASSERT_THAT(r->BeginPass(pass == 0, pass == 1), IsOk());
    for (size_t p = numels.size(); p-- > 0;) {  // backward order
      std::vector<float> g(numels[p]);
      for (float& x : g) x = u(rng);
      const size_t off = layout.slices()[p].flat_offset;
      for (size_t i = 0; i < g.size(); ++i) want[off + i] += g[i];
      ASSERT_THAT(
          compute.CopyAsync(slots[p], g.data(), g.size() * sizeof(float), CopyKind::kHostToDevice),
          IsOk());
      for (auto& r : reducers) ASSERT_THAT(r->Ready(p, static_cast<float*>(slots[p])), IsOk());
      ASSERT_THAT(compute.Synchronize(), IsOk());  // the slot is rewritten for the next one
    }
    for (auto& r : reducers) ASSERT_THAT(r->Flush(), IsOk());
    ASSERT_THAT(compute.Synchronize(), IsOk());
  }
  EXPECT_EQ(host, want);
  std::vector<float> got(n, -1.0f);
  ASSERT_THAT(region->Read(0, n, got.data()), IsOk());
  EXPECT_EQ(got, want);
  double sq = 0;  // Note [Squared-norm order]: 4096-element chunks, each summed in order
  for (size_t c = 0; c < n; c += 4096) {
    double s = 0;
    for (size_t i = c; i < std::min(n, c + 4096); ++i) s += static_cast<double>(want[i]) * want[i];
    sq += s;
  }
  EXPECT_EQ(region->SquaredNorm(), sq);
  EXPECT_GT(region->TakeStats().bytes_read, 0u);
  reducers.clear();
  for (void* s : slots) device->Free(s).IgnoreError();
  device->DestroyStream(compute).IgnoreError();
}

}  // namespace
}  // namespace strata
