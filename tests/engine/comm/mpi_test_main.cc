#include "tests/engine/comm/mpi_test_main.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "engine/comm/registry.h"
#include "offload/device/host/host_device.h"

// Size checks on (strata.comm_check_sizes) unless the target says otherwise.
#ifndef STRATA_MPI_TEST_CHECK_SIZES
#define STRATA_MPI_TEST_CHECK_SIZES 1
#endif

namespace strata::testing {
namespace {

std::unique_ptr<Device> g_device;
std::unique_ptr<Communicator> g_world;

// Ranks other than 0 print only failed assertions, prefixed with their rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

Communicator& World() { return *g_world; }
Device& TestDevice() { return *g_device; }

}  // namespace strata::testing

int main(int argc, char** argv) {
  using strata::CommBackend, strata::CommOptions, strata::CreateCommunicator,
      strata::CreateHostDevice, strata::HostDeviceOptions;
  ::testing::InitGoogleTest(&argc, argv);
  HostDeviceOptions dev;
  dev.memory_bytes = size_t{64} << 20;
  dev.populate_memory = false;
  auto device = CreateHostDevice(dev);
  if (!device.ok()) {
    std::fprintf(stderr, "device: %s\n", device.status().ToString().c_str());
    return 1;
  }
  strata::testing::g_device = std::move(device).value();
  CommOptions options;
  options.backend = CommBackend::kMpi;
  options.timeout_s = 120;  // ranks oversubscribed on a loaded 2-core CI machine
  options.check_sizes = STRATA_MPI_TEST_CHECK_SIZES != 0;
  auto comm = CreateCommunicator(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "communicator: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  strata::testing::g_world = std::move(comm).value();
  const int rank = strata::testing::g_world->rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new strata::testing::FailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
  strata::testing::g_world.reset();
  strata::testing::g_device.reset();
  return rc;
}
