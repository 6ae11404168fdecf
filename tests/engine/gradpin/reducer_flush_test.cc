// GradReducer's flush hint (engine/grad_reducer.h): a parameter the hint names reduces the queued
// bucket at once, the others wait for the bucket to fill; the host partition gets the same sums
// either way (a plain float reference: one += per parameter).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "engine/comm/local_communicator.h"
#include "engine/grad_reducer.h"
#include "engine/partition.h"
#include "offload/device/host/host_device.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

struct Rig {
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  Stream compute;
  PartitionLayout layout;
  std::vector<float> host;
  std::vector<void*> slots;
  std::unique_ptr<GradReducer> reducer;

  ~Rig() {
    reducer.reset();
    for (void* p : slots) device->Free(p).IgnoreError();
    if (compute.valid()) device->DestroyStream(compute).IgnoreError();
  }
};

void MakeRig(Rig* r, const std::vector<size_t>& numels, size_t bucket) {
  HostDeviceOptions ho;
  Result<std::unique_ptr<Device>> d = CreateHostDevice(ho);
  ASSERT_THAT(d.status(), IsOk());
  r->device = std::move(*d);
  r->comm = internal::CreateLocalCommunicator();
  Result<Stream> s = r->device->CreateStream();
  ASSERT_THAT(s.status(), IsOk());
  r->compute = *s;
  Result<PartitionLayout> l = PartitionLayout::Create(numels, 1, 0, 16);
  ASSERT_THAT(l.status(), IsOk());
  r->layout = std::move(*l);
  r->host.assign(r->layout.partition_numel(), 0.0f);
  GradReducerOptions o;
  o.comm = r->comm.get();
  o.device = r->device.get();
  o.compute = r->compute;
  o.bucket_numel = bucket;
  o.layout = &r->layout;
  o.host_partition = r->host.data();
  o.pin_memory = false;
  Result<std::unique_ptr<GradReducer>> red = GradReducer::Create(o);
  ASSERT_THAT(red.status(), IsOk());
  r->reducer = std::move(*red);
  for (size_t n : numels) {
    Result<void*> m = r->device->Allocate(n * sizeof(float));
    ASSERT_THAT(m.status(), IsOk());
    r->slots.push_back(*m);
  }
}

TEST(GradReducerFlushHintTest, HintedParameterReducesTheBucketAtOnceWithTheSameSums) {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::vector<size_t> numels = {300, 17, 1000, 64, 5, 777};
  Rig r;
  ASSERT_NO_FATAL_FAILURE(MakeRig(&r, numels, /*bucket=*/1'000'000));  // never fills
  const std::vector<size_t> hinted = {1, 4};                           // "completes a sub-group"
  r.reducer->set_flush_hint(
      [&](size_t p) { return std::find(hinted.begin(), hinted.end(), p) != hinted.end(); });
  std::vector<double> want(r.layout.partition_numel(), 0.0);
  for (int pass = 0; pass < 2; ++pass) {  // accumulation: a second backward adds on top
    for (size_t p = 0; p < numels.size(); ++p) {
      std::vector<float> g(numels[p]);
      for (float& x : g) x = u(rng);
      const size_t off = r.layout.slices()[p].flat_offset;
      for (size_t i = 0; i < g.size(); ++i) {
        want[off + i] = static_cast<float>(static_cast<float>(want[off + i]) + g[i]);
      }
      ASSERT_THAT(r.compute.CopyAsync(r.slots[p], g.data(), g.size() * sizeof(float),
                                      CopyKind::kHostToDevice),
                  IsOk());
      ASSERT_THAT(r.compute.Synchronize(), IsOk());
      const uint64_t before = r.reducer->bucket_count();
      ASSERT_THAT(r.reducer->Ready(p, static_cast<float*>(r.slots[p])), IsOk());
      const bool flushed = r.reducer->bucket_count() == before + 1;
      EXPECT_EQ(flushed, p == 1 || p == 4) << "parameter " << p;
      // A flushed bucket holds every parameter queued so far.
      if (flushed) {
        EXPECT_EQ(r.reducer->reduced_count(), pass * numels.size() + p + 1);
      }
    }
    ASSERT_THAT(r.reducer->Flush(), IsOk());
    ASSERT_THAT(r.compute.Synchronize(), IsOk());
    EXPECT_EQ(r.reducer->bucket_count(), static_cast<uint64_t>(3 * (pass + 1)));
  }
  for (size_t p = 0; p < numels.size(); ++p) {
    const size_t off = r.layout.slices()[p].flat_offset;
    for (size_t i = 0; i < numels[p]; ++i) {
      ASSERT_EQ(r.host[off + i], static_cast<float>(want[off + i])) << p << ":" << i;
    }
  }
}

}  // namespace
}  // namespace strata
