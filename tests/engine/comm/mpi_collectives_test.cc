// Every collective x dtype x odd size on the mpi backend, run by ctest under mpirun with 1, 2 and
// 3 ranks. Each rank's input is a pure function of (rank, index), so every rank computes the
// whole expected result itself, in double, from inputs it regenerates (never from the code under
// test). Tolerances (u: fp32 2^-24, fp16 2^-11, bf16 2^-8): sums |got - ref| <= world * u *
// sum|x| (one rounding per reduction step, in fp32, then to the type), plus fp16's subnormal
// spacing per step; everything else exact.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "core/half.h"
#include "engine/comm/communicator.h"
#include "engine/comm/host_math.h"
#include "offload/device/api/kernels.h"
#include "tests/engine/comm/mpi_test_main.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;
using testing::TestDevice;
using testing::World;

constexpr size_t kSizes[] = {1, 7, 1001, 65537};  // none divisible by 2 or 3 (but 1)

// Absolute floor: the spacing of fp16 subnormals (a predivided input may become one).
double Floor(DType t) { return t == DType::kFloat16 ? std::ldexp(1.0, -24) : 1e-30; }

double Unit(DType t) {
  return t == DType::kFloat32 ? std::ldexp(1.0, -24)
                              : std::ldexp(1.0, t == DType::kFloat16 ? -11 : -8);
}

// Input of `rank` at index i: in [-4, 4), exactly representable in `t`.
double Value(int rank, size_t i, DType t) {
  uint64_t z =
      (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 31)) * 0x94D049BB133111EBull;
  z ^= z >> 29;
  const float f = static_cast<float>(static_cast<double>(z >> 11) / 9007199254740992.0 * 8 - 4);
  if (t == DType::kFloat16) return Fp16ToFloat(FloatToFp16(f));
  if (t == DType::kBFloat16) return Bf16ToFloat(FloatToBf16(f));
  return f;
}

class Buffer {
 public:
  Buffer(DType t, size_t numel) : t_(t), numel_(numel) {
    auto p = TestDevice().Allocate(std::max<size_t>(1, numel * DTypeBytes(t)));
    EXPECT_THAT(p.status(), IsOk());
    p_ = p.ok() ? *p : nullptr;
  }
  ~Buffer() {
    if (p_ != nullptr) TestDevice().Free(p_).IgnoreError();
  }
  void* data() const { return p_; }
  void* at(size_t i) const { return static_cast<char*>(p_) + i * DTypeBytes(t_); }
  double Get(size_t i) const { return internal::LoadAsFloat(p_, t_, i); }
  void Set(size_t i, double v) { internal::StoreFloat(p_, t_, i, static_cast<float>(v)); }
  void FillRank(int rank, size_t first = 0) {
    for (size_t i = 0; i < numel_; ++i) Set(i, Value(rank, first + i, t_));
  }

 private:
  DType t_;
  size_t numel_;
  void* p_ = nullptr;
};

class MpiCollectivesTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    auto s = TestDevice().CreateStream();
    ASSERT_THAT(s.status(), IsOk());
    stream_ = *s;
  }
  void TearDown() override { EXPECT_THAT(TestDevice().DestroyStream(stream_), IsOk()); }
  Communicator& comm() { return World(); }
  int rank() { return World().rank(); }
  int world() { return World().world_size(); }

  Stream stream_;
};

TEST_P(MpiCollectivesTest, AllReduceSumMatchesDoubleReference) {
  const DType t = GetParam();
  for (size_t n : kSizes) {
    for (bool in_place : {false, true}) {
      Buffer send(t, n), recv(t, n);
      send.FillRank(rank());
      Buffer& out = in_place ? send : recv;
      ASSERT_THAT(comm().AllReduce(stream_, send.data(), out.data(), n, t, ReduceOp::kSum, nullptr),
                  IsOk());
      ASSERT_THAT(stream_.Synchronize(), IsOk());
      for (size_t i = 0; i < n; ++i) {
        double ref = 0, mag = 0;
        for (int r = 0; r < world(); ++r) ref += Value(r, i, t), mag += std::fabs(Value(r, i, t));
        ASSERT_NEAR(out.Get(i), ref, world() * (Unit(t) * mag + Floor(t)))
            << "n=" << n << " i=" << i << " in_place=" << in_place;
      }
    }
  }
}

TEST_P(MpiCollectivesTest, AllReduceMaxIsExact) {
  const DType t = GetParam();
  for (size_t n : kSizes) {
    Buffer send(t, n), recv(t, n);
    send.FillRank(rank());
    ASSERT_THAT(comm().AllReduce(stream_, send.data(), recv.data(), n, t, ReduceOp::kMax, nullptr),
                IsOk());
    ASSERT_THAT(stream_.Synchronize(), IsOk());
    for (size_t i = 0; i < n; ++i) {
      double ref = Value(0, i, t);
      for (int r = 1; r < world(); ++r) ref = std::max(ref, Value(r, i, t));
      ASSERT_EQ(recv.Get(i), ref) << "n=" << n << " i=" << i;
    }
  }
}

TEST_P(MpiCollectivesTest, ReduceScatterSumsShardsWithPredivideAndZeroPadding) {
  const DType t = GetParam();
  for (size_t n : kSizes) {
    for (double predivide : {1.0, 4.0}) {
      const size_t shard = ShardNumel(n, world());
      Buffer send(t, n), recv(t, shard);
      send.FillRank(rank());
      ReduceScatterOptions o;
      o.predivide_factor = predivide;
      ASSERT_THAT(comm().ReduceScatter(stream_, send.data(), recv.data(), n, t, o, nullptr),
                  IsOk());
      ASSERT_THAT(stream_.Synchronize(), IsOk());
      for (size_t j = 0; j < shard; ++j) {
        const size_t g = static_cast<size_t>(rank()) * shard + j;
        double ref = 0, mag = 0;
        for (int r = 0; g < n && r < world(); ++r) {
          ref += Value(r, g, t) / predivide, mag += std::fabs(Value(r, g, t)) / predivide;
        }
        ASSERT_NEAR(recv.Get(j), ref, (world() + 1) * (Unit(t) * mag + Floor(t)))
            << "n=" << n << " shard index " << j << " predivide " << predivide;
        if (g >= n) {
          ASSERT_EQ(recv.Get(j), 0.0) << "padding must be zero";
        }
      }
    }
  }
}

TEST_P(MpiCollectivesTest, AllGatherConcatenatesShardsAndDropsPadding) {
  const DType t = GetParam();
  for (size_t n : kSizes) {
    for (bool in_place : {false, true}) {
      const size_t shard = ShardNumel(n, world());
      // In place: the shard sits at its place in a recv buffer holding every padded shard.
      Buffer send(t, shard), recv(t, in_place ? shard * world() : n);
      Buffer* src = &send;
      const size_t first = static_cast<size_t>(rank()) * shard;
      for (size_t j = 0; j < shard; ++j) {
        const double v = Value(rank(), first + j, t);
        if (in_place) {
          recv.Set(first + j, v);
        } else {
          send.Set(j, v);
        }
      }
      const void* send_ptr = in_place ? recv.at(first) : src->data();
      ASSERT_THAT(comm().AllGather(stream_, send_ptr, recv.data(), n, t, nullptr), IsOk());
      ASSERT_THAT(stream_.Synchronize(), IsOk());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(recv.Get(i), Value(static_cast<int>(i / shard), i, t))
            << "n=" << n << " i=" << i << " in_place=" << in_place;
      }
    }
  }
}

TEST_P(MpiCollectivesTest, BroadcastCopiesTheRootsBuffer) {
  const DType t = GetParam();
  const int root = world() - 1;
  for (size_t n : kSizes) {
    Buffer buf(t, n);
    buf.FillRank(rank());
    ASSERT_THAT(comm().Broadcast(stream_, buf.data(), n, t, root, nullptr), IsOk());
    ASSERT_THAT(stream_.Synchronize(), IsOk());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf.Get(i), Value(root, i, t)) << "i=" << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MpiCollectivesTest,
                         ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

class MpiCommTest : public MpiCollectivesTest {};

TEST_F(MpiCommTest, BarrierCompletesItsEvent) {
  auto ev = TestDevice().CreateEvent();
  ASSERT_THAT(ev.status(), IsOk());
  ASSERT_THAT(comm().Barrier(stream_, &*ev), IsOk());
  EXPECT_THAT(ev->Synchronize(), IsOk());
}

// A collective in flight does not hold up other streams: rank 0 sees its all-reduce still
// pending while its compute stream finishes other work; the last rank joins the all-reduce only
// after rank 0 has looked (ordered by a barrier on a second communicator).
TEST_F(MpiCommTest, OtherStreamsProgressWhileACollectiveIsInFlight) {
  if (world() < 2) GTEST_SKIP() << "needs a peer to hold the collective open";
  auto side = comm().Split(0, rank());
  ASSERT_THAT(side.status(), IsOk());
  auto compute = TestDevice().CreateStream();
  ASSERT_THAT(compute.status(), IsOk());
  auto done = TestDevice().CreateEvent();
  ASSERT_THAT(done.status(), IsOk());
  const size_t n = 4097;
  Buffer send(DType::kFloat32, n), recv(DType::kFloat32, n), work(DType::kFloat32, n);
  send.FillRank(rank());
  for (size_t i = 0; i < n; ++i) work.Set(i, 1.0);
  const bool late = rank() == world() - 1;
  if (!late) {
    ASSERT_THAT(comm().AllReduce(stream_, send.data(), recv.data(), n, DType::kFloat32,
                                 ReduceOp::kSum, &*done),
                IsOk());
    ASSERT_THAT(LaunchScale(*compute, work.data(), DType::kFloat32, work.data(), 3.0f, n), IsOk());
    ASSERT_THAT(compute->Synchronize(), IsOk());
    EXPECT_EQ(work.Get(n - 1), 3.0);
    auto pending = done->Query();
    ASSERT_THAT(pending.status(), IsOk());
    EXPECT_FALSE(*pending) << "the all-reduce cannot be complete: the last rank has not joined";
  }
  ASSERT_THAT((*side)->Barrier(*compute, nullptr), IsOk());
  ASSERT_THAT(compute->Synchronize(), IsOk());
  if (late) {
    ASSERT_THAT(comm().AllReduce(stream_, send.data(), recv.data(), n, DType::kFloat32,
                                 ReduceOp::kSum, &*done),
                IsOk());
  }
  ASSERT_THAT(done->Synchronize(), IsOk());
  double ref = 0;
  for (int r = 0; r < world(); ++r) ref += Value(r, n - 1, DType::kFloat32);
  EXPECT_NEAR(recv.Get(n - 1), ref, 1e-5);
  EXPECT_THAT(TestDevice().DestroyStream(*compute), IsOk());
}

// Size checks on (this suite's world communicator) and collectives on two streams, as the engine
// issues them with overlap_comm: rank 0 has both ops ready at once, so it starts the second op's
// size check before the first op's check can complete (the last rank calls late); the last rank
// issues its first collective before it even calls the second. Every rank must still issue the
// collectives in call order (Note [Issue order with size checks] in collective_queue.h): before,
// the second check and the first collective were paired across ranks and OpenMPI aborted
// (NBC_Progress error 15, MPI_ERR_TRUNCATE).
TEST_F(MpiCommTest, CollectivesOnTwoStreamsStayInCallOrderWithSizeChecks) {
  if (world() < 2) GTEST_SKIP() << "the order only matters with a peer";
  auto other = TestDevice().CreateStream();
  ASSERT_THAT(other.status(), IsOk());
  const size_t n = 1001, m = 65537;
  Buffer a(DType::kFloat32, n), b(DType::kFloat32, m);
  Buffer shard(DType::kFloat32, ShardNumel(m, world()));
  const bool late = rank() == world() - 1;
  for (int round = 0; round < 4; ++round) {
    a.FillRank(rank());
    b.FillRank(rank(), n);
    if (late) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // provokes, not timed
    ASSERT_THAT(
        comm().AllReduce(stream_, a.data(), a.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr),
        IsOk());
    if (late) {
      ASSERT_THAT(stream_.Synchronize(), IsOk());
    }
    ASSERT_THAT(
        comm().ReduceScatter(*other, b.data(), shard.data(), m, DType::kFloat32, {}, nullptr),
        IsOk());
    ASSERT_THAT(stream_.Synchronize(), IsOk());
    ASSERT_THAT(other->Synchronize(), IsOk());
    double ref_a = 0, ref_b = 0;
    const size_t j = ShardNumel(m, world()) * static_cast<size_t>(rank());  // first of my shard
    for (int r = 0; r < world(); ++r) {
      ref_a += Value(r, n - 1, DType::kFloat32);
      if (j < m) ref_b += Value(r, n + j, DType::kFloat32);
    }
    EXPECT_NEAR(a.Get(n - 1), ref_a, 1e-5) << "round " << round;
    EXPECT_NEAR(shard.Get(0), ref_b, 1e-5) << "round " << round;
  }
  EXPECT_THAT(TestDevice().DestroyStream(*other), IsOk());
}

TEST_F(MpiCommTest, SplitMakesGroupsThatReduceAmongTheirMembers) {
  const int color = rank() % 2;
  auto sub = comm().Split(color, -rank());  // reversed order inside each group
  ASSERT_THAT(sub.status(), IsOk());
  ASSERT_NE(*sub, nullptr);
  std::vector<int> members;
  for (int r = world() - 1; r >= 0; --r) {
    if (r % 2 == color) members.push_back(r);
  }
  EXPECT_EQ((*sub)->world_size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[static_cast<size_t>((*sub)->rank())], rank());
  Buffer x(DType::kFloat32, 3);
  x.FillRank(rank());
  ASSERT_THAT(
      (*sub)->AllReduce(stream_, x.data(), x.data(), 3, DType::kFloat32, ReduceOp::kSum, nullptr),
      IsOk());
  ASSERT_THAT(stream_.Synchronize(), IsOk());
  double ref = 0;
  for (int r : members) ref += Value(r, 2, DType::kFloat32);
  EXPECT_NEAR(x.Get(2), ref, 1e-5);

  auto none = comm().Split(Communicator::kNoColor, 0);
  ASSERT_THAT(none.status(), IsOk());
  EXPECT_EQ(*none, nullptr);
}

TEST_F(MpiCommTest, MismatchedSizesFailEveryRankNamingTheRanks) {
  if (world() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  auto fresh = comm().Split(0, rank());  // this communicator is failed by the test
  ASSERT_THAT(fresh.status(), IsOk());
  const size_t n = rank() == 1 ? 101 : 100;
  Buffer x(DType::kFloat32, 101);
  ASSERT_THAT(
      (*fresh)->AllReduce(stream_, x.data(), x.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr),
      IsOk());
  EXPECT_THAT(
      stream_.Synchronize(),
      StatusIs(StatusCode::kInvalidArgument,
               ::testing::AllOf(HasSubstr("all_reduce #1"), HasSubstr("mismatched collective"),
                                HasSubstr("rank 1: all_reduce #1 (fp32, 101 elements"),
                                HasSubstr("rank 0: all_reduce #1 (fp32, 100 elements"))));
  EXPECT_THAT((*fresh)->Barrier(stream_, nullptr),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("failed earlier")));
  // The stream keeps its error (Note [Stream errors]): the test makes a new one in SetUp.
  ASSERT_THAT(TestDevice().DestroyStream(stream_),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("mismatched")));
  stream_ = *TestDevice().CreateStream();
}

TEST_F(MpiCommTest, BadArgumentsFailAtOnce) {
  Buffer x(DType::kFloat32, 8);
  EXPECT_THAT(comm().Broadcast(stream_, x.data(), 8, DType::kFloat32, world(), nullptr),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("root")));
  EXPECT_THAT(
      comm().AllReduce(stream_, x.data(), x.at(1), 4, DType::kFloat32, ReduceOp::kSum, nullptr),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("overlap")));
  EXPECT_THAT(
      comm().AllReduce(Stream(), x.data(), x.data(), 4, DType::kFloat32, ReduceOp::kSum, nullptr),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("stream")));
  ReduceScatterOptions o;
  o.predivide_factor = 0;
  EXPECT_THAT(comm().ReduceScatter(stream_, x.data(), x.data(), 8, DType::kFloat32, o, nullptr),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("predivide_factor")));
}

}  // namespace
}  // namespace strata
