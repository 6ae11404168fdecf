// The local backend (world 1), the factory's choices, and CommunicatorWrapper as a fault injector.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/comm/registry.h"
#include "offload/device/host/host_device.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

class LocalCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostDeviceOptions o;
    o.memory_bytes = size_t{1} << 20;
    o.populate_memory = false;
    auto d = CreateHostDevice(o);
    ASSERT_THAT(d.status(), IsOk());
    device_ = std::move(d).value();
    stream_ = *device_->CreateStream();
    CommOptions options;
    options.log_choice = false;
    auto c = CreateCommunicator(options, LaunchEnv{});
    ASSERT_THAT(c.status(), IsOk());
    comm_ = std::move(c).value();
  }
  float* Floats(size_t n) { return static_cast<float*>(*device_->Allocate(n * sizeof(float))); }

  std::unique_ptr<Device> device_;
  Stream stream_;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(LocalCommTest, AutoWithoutALauncherIsLocalWorldOne) {
  EXPECT_EQ(comm_->backend_name(), "local");
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_EQ(comm_->rank(), 0);
}

TEST_F(LocalCommTest, CollectivesOfOneRankCopyAndScale) {
  float* a = Floats(5);
  float* b = Floats(5);
  for (int i = 0; i < 5; ++i) a[i] = static_cast<float>(i + 1);
  auto ev = device_->CreateEvent();
  ASSERT_THAT(comm_->AllReduce(stream_, a, b, 5, DType::kFloat32, ReduceOp::kSum, nullptr), IsOk());
  ASSERT_THAT(stream_.Synchronize(), IsOk());
  EXPECT_EQ(b[4], 5.0f);
  ReduceScatterOptions o;
  o.predivide_factor = 2;
  ASSERT_THAT(comm_->ReduceScatter(stream_, a, b, 5, DType::kFloat32, o, nullptr), IsOk());
  ASSERT_THAT(comm_->Barrier(stream_, &*ev), IsOk());
  ASSERT_THAT(ev->Synchronize(), IsOk());
  EXPECT_EQ(b[3], 2.0f);
  ASSERT_THAT(comm_->AllGather(stream_, a, b, 5, DType::kFloat32, nullptr), IsOk());
  ASSERT_THAT(comm_->Broadcast(stream_, b, 5, DType::kFloat32, 0, nullptr), IsOk());
  ASSERT_THAT(stream_.Synchronize(), IsOk());
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_THAT(comm_->Broadcast(stream_, b, 5, DType::kFloat32, 1, nullptr),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("root 1 is not a rank")));
  auto sub = comm_->Split(0, 0);
  ASSERT_THAT(sub.status(), IsOk());
  EXPECT_EQ((*sub)->world_size(), 1);
}

TEST(CommRegistryTest, RejectsBadOptionsNamingTheKey) {
  EXPECT_THAT(ParseCommBackend("gloo"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("allowed: auto, local, mpi, nccl")));
  CommOptions o;
  o.timeout_s = 0;
  EXPECT_THAT(CreateCommunicator(o, LaunchEnv{}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("strata.comm_timeout_s")));
  CommOptions local;
  local.backend = CommBackend::kLocal;
  LaunchEnv three;
  three.world_size = 3;
  three.source = "env";
  EXPECT_THAT(CreateCommunicator(local, three),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("local is a world of one rank")));
}

// A fault injector in a few lines: the n-th all-reduce fails as a transport error would.
class FailNthAllReduce : public CommunicatorWrapper {
 public:
  FailNthAllReduce(Communicator* target, int n) : CommunicatorWrapper(target), left_(n) {}
  Status AllReduce(const Stream& stream, const void* send, void* recv, size_t numel, DType dtype,
                   ReduceOp op, Event* done) override {
    if (--left_ == 0) {
      return stream.LaunchHostFunc(
          [] { return AbortedError("injected: all_reduce #3: rank 1 did not answer"); });
    }
    return CommunicatorWrapper::AllReduce(stream, send, recv, numel, dtype, op, done);
  }

 private:
  int left_;
};

TEST_F(LocalCommTest, WrapperInjectsAFailureThatBecomesTheStreamsError) {
  FailNthAllReduce faulty(comm_.get(), 3);
  float* x = Floats(4);
  EXPECT_EQ(faulty.world_size(), 1);
  for (int i = 0; i < 2; ++i) {
    ASSERT_THAT(faulty.AllReduce(stream_, x, x, 4, DType::kFloat32, ReduceOp::kSum, nullptr),
                IsOk());
  }
  ASSERT_THAT(stream_.Synchronize(), IsOk());
  ASSERT_THAT(faulty.AllReduce(stream_, x, x, 4, DType::kFloat32, ReduceOp::kSum, nullptr), IsOk());
  auto ev = device_->CreateEvent();
  ASSERT_THAT(faulty.Barrier(stream_, &*ev), IsOk());
  EXPECT_THAT(ev->Synchronize(), StatusIs(StatusCode::kAborted, HasSubstr("rank 1")));
  EXPECT_THAT(stream_.Synchronize(), StatusIs(StatusCode::kAborted, HasSubstr("injected")));
}

TEST(LaunchEnvTest, ReadsDeepSpeedVariablesThenOpenMpis) {
  auto env = [](std::vector<std::pair<const char*, const char*>> vars) {
    return [vars](const char* name) -> const char* {
      for (auto& [k, v] : vars) {
        if (std::strcmp(k, name) == 0) return v;
      }
      return nullptr;
    };
  };
  auto none = ReadLaunchEnv(env({}));
  ASSERT_THAT(none.status(), IsOk());
  EXPECT_FALSE(none->launched());
  EXPECT_EQ(none->world_size, 1);

  auto ds = ReadLaunchEnv(env({{"RANK", "2"},
                               {"WORLD_SIZE", "4"},
                               {"LOCAL_RANK", "0"},
                               {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "node1"},
                               {"MASTER_PORT", "29500"}}));
  ASSERT_THAT(ds.status(), IsOk());
  EXPECT_EQ(ds->ToString(), "rank 2/4 (local 0/2, from env)");
  EXPECT_EQ(ds->master_addr, "node1");
  EXPECT_EQ(ds->master_port, 29500);

  auto ompi = ReadLaunchEnv(env({{"OMPI_COMM_WORLD_RANK", "1"},
                                 {"OMPI_COMM_WORLD_SIZE", "3"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}));
  ASSERT_THAT(ompi.status(), IsOk());
  EXPECT_EQ(ompi->ToString(), "rank 1/3 (local 1/3, from openmpi)");

  EXPECT_THAT(
      ReadLaunchEnv(env({{"RANK", "3"}, {"WORLD_SIZE", "3"}})),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("RANK=3 is not in [0, WORLD_SIZE=3)")));
  EXPECT_THAT(ReadLaunchEnv(env({{"RANK", "1"}})),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("WORLD_SIZE is not set")));
  EXPECT_THAT(ReadLaunchEnv(env({{"RANK", "x"}, {"WORLD_SIZE", "2"}})),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("RANK='x'")));
  EXPECT_THAT(ReadLaunchEnv(env({{"RANK", "0"},
                                 {"WORLD_SIZE", "2"},
                                 {"OMPI_COMM_WORLD_RANK", "1"},
                                 {"OMPI_COMM_WORLD_SIZE", "2"}})),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("disagree")));
  EXPECT_THAT(ReadLaunchEnv(env({{"MASTER_PORT", "70000"}})),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("MASTER_PORT")));
}

}  // namespace
}  // namespace strata
