// GradReducer (engine/zero/grad/grad_reducer.h) into a host partition. The flush hint: a parameter
// the hint names reduces the queued bucket at once, the others wait for the bucket to fill; the
// host partition gets the same sums either way (a plain float reference: one += per parameter). On
// one rank (nothing to communicate) every slot is reduced as soon as it is ready, whatever the
// bucket size, unless the options ask for buckets there too (the hint test does). A stale host
// partition (Note [Copy first]): the pass after MarkHostStale copies, zeroes what it did not
// reduce, adds a second contribution of the same parameter, and the next pass adds.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "engine/base/partition.h"
#include "engine/comm/local_communicator.h"
#include "engine/zero/grad/grad_reducer.h"
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

void MakeRig(Rig* r, const std::vector<size_t>& numels, size_t bucket,
             bool bucket_one_rank = true) {
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
  o.bucket_one_rank = bucket_one_rank;
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

TEST(GradReducerOneRankTest, EverySlotIsReducedAtOnceWhateverTheBucketSize) {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::vector<size_t> numels = {300, 17, 1000, 64, 5, 777};
  Rig r;
  ASSERT_NO_FATAL_FAILURE(
      MakeRig(&r, numels, /*bucket=*/1'000'000, /*bucket_one_rank=*/false));  // never fills
  std::vector<float> want(r.layout.partition_numel(), 0.0f);
  for (size_t p = 0; p < numels.size(); ++p) {
    std::vector<float> g(numels[p]);
    for (float& x : g) x = u(rng);
    const size_t off = r.layout.slices()[p].flat_offset;
    for (size_t i = 0; i < g.size(); ++i) want[off + i] += g[i];
    ASSERT_THAT(r.compute.CopyAsync(r.slots[p], g.data(), g.size() * sizeof(float),
                                    CopyKind::kHostToDevice),
                IsOk());
    ASSERT_THAT(r.compute.Synchronize(), IsOk());
    ASSERT_THAT(r.reducer->Ready(p, static_cast<float*>(r.slots[p])), IsOk());
    EXPECT_EQ(r.reducer->bucket_count(), p + 1) << "parameter " << p;
    EXPECT_EQ(r.reducer->reduced_count(), p + 1) << "parameter " << p;
  }
  ASSERT_THAT(r.reducer->Flush(), IsOk());
  ASSERT_THAT(r.compute.Synchronize(), IsOk());
  EXPECT_EQ(r.reducer->bucket_count(), numels.size());  // Flush found nothing queued
  for (size_t p = 0; p < numels.size(); ++p) {
    const size_t off = r.layout.slices()[p].flat_offset;
    for (size_t i = 0; i < numels[p]; ++i) {
      ASSERT_EQ(r.host[off + i], want[off + i]) << p << ":" << i;
    }
  }
}

// One parameter's gradient: copied to its slot, then Ready.
void Reduce(Rig& r, size_t p, const std::vector<float>& g) {
  ASSERT_THAT(
      r.compute.CopyAsync(r.slots[p], g.data(), g.size() * sizeof(float), CopyKind::kHostToDevice),
      IsOk());
  ASSERT_THAT(r.compute.Synchronize(), IsOk());
  ASSERT_THAT(r.reducer->Ready(p, static_cast<float*>(r.slots[p])), IsOk());
}

TEST(GradReducerCopyFirstTest, StalePassCopiesZeroesTheRestAndTheNextPassAdds) {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // Parameter 2 is large, so its second add (on the reducer's add stream) is still running when
  // a stream that did not wait for it reaches the end of the pass.
  const std::vector<size_t> numels = {300, 17, size_t{1} << 21, 64, 5, 777};
  Rig r;
  ASSERT_NO_FATAL_FAILURE(MakeRig(&r, numels, /*bucket=*/1'000'000));
  // Every parameter reduces at once (its slot is reused for its next gradient), on the compute
  // stream; the host adds run on the reducer's own stream.
  r.reducer->set_flush_hint([](size_t) { return true; });
  std::vector<Stream> reported(numels.size());
  r.reducer->set_reduced_fn([&](const Stream& s, size_t p) {
    reported[p] = s;
    return Status::Ok();
  });
  auto random = [&](size_t n) {
    std::vector<float> g(n);
    for (float& x : g) x = u(rng);
    return g;
  };

  // Stale contents (what the last step left, never zeroed): NaN everywhere.
  std::fill(r.host.begin(), r.host.end(), std::numeric_limits<float>::quiet_NaN());
  r.reducer->MarkHostStale();
  // Pass 1 reduces parameters 0, 2 (twice: copied, then added), 3 and 5; 1 and 4 get nothing.
  std::vector<double> want(r.layout.partition_numel(), 0.0);
  const std::vector<size_t> order = {0, 2, 3, 2, 5};
  for (size_t p : order) {
    std::vector<float> g = random(numels[p]);
    if (p == 0) g[7] = -0.0f;  // the copy keeps a zero's sign (the add would give +0.0)
    const size_t off = r.layout.slices()[p].flat_offset;
    for (size_t i = 0; i < g.size(); ++i) {
      want[off + i] = static_cast<float>(static_cast<float>(want[off + i]) + g[i]);
    }
    ASSERT_NO_FATAL_FAILURE(Reduce(r, p, g));
  }
  // The stream reported for the pass's last parameter follows every write of the pass, the
  // second add of 2 included.
  ASSERT_TRUE(reported[5].valid());
  ASSERT_THAT(reported[5].Synchronize(), IsOk());
  for (size_t p : {2, 0, 3, 5}) {
    const size_t off = r.layout.slices()[p].flat_offset;
    for (size_t i = numels[p]; i-- > 0;) {  // the add's last elements first
      ASSERT_EQ(r.host[off + i], static_cast<float>(want[off + i])) << p << ":" << i;
    }
  }
  EXPECT_TRUE(std::signbit(r.host[r.layout.slices()[0].flat_offset + 7]));
  ASSERT_THAT(r.reducer->Flush(), IsOk());
  ASSERT_THAT(r.compute.Synchronize(), IsOk());
  for (size_t p : {1, 4}) {  // not reduced: zeroed (+0.0, not the stale NaN)
    const size_t off = r.layout.slices()[p].flat_offset;
    for (size_t i = 0; i < numels[p]; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(r.host[off + i]), 0u) << p << ":" << i;
    }
  }

  // Pass 2 (the same step's next micro-batch): every parameter adds.
  for (size_t p = 0; p < numels.size(); ++p) {
    const std::vector<float> g = random(numels[p]);
    const size_t off = r.layout.slices()[p].flat_offset;
    for (size_t i = 0; i < g.size(); ++i) {
      want[off + i] = static_cast<float>(static_cast<float>(want[off + i]) + g[i]);
    }
    ASSERT_NO_FATAL_FAILURE(Reduce(r, p, g));
  }
  ASSERT_THAT(r.reducer->Flush(), IsOk());
  ASSERT_THAT(r.compute.Synchronize(), IsOk());
  for (size_t p = 0; p < numels.size(); ++p) {
    const size_t off = r.layout.slices()[p].flat_offset;
    for (size_t i = 0; i < numels[p]; ++i) {
      ASSERT_EQ(r.host[off + i], static_cast<float>(want[off + i])) << p << ":" << i;
    }
  }
}

}  // namespace
}  // namespace strata
