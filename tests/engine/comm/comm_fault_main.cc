// comm_fault_main: a rank leaves and the others must fail with an error naming it, in bounded
// time. Run under mpirun by ctest through check_fault.cmake, which counts the FAULT_OK lines.
//
//   comm_fault_main exit   the last rank exits right after creating the communicator
//   comm_fault_main skip   the last rank stays alive but never calls the collective
//
// Every other rank runs an all-reduce with a 1.5 s timeout and prints FAULT_OK when it fails with
// Aborted naming the last rank and the reason, FAULT_BAD otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/registry.h"
#include "offload/device/host/host_device.h"

int main(int argc, char** argv) {
  using namespace strata;  // NOLINT
  const std::string mode = argc > 1 ? argv[1] : "exit";
  HostDeviceOptions dev;
  dev.memory_bytes = size_t{1} << 20;
  dev.populate_memory = false;
  auto device = CreateHostDevice(dev);
  CommOptions options;
  options.backend = CommBackend::kMpi;
  options.timeout_s = 1.5;
  auto comm = CreateCommunicator(options);
  if (!device.ok() || !comm.ok()) {
    std::printf("FAULT_BAD setup: %s %s\n", device.status().ToString().c_str(),
                comm.status().ToString().c_str());
    return 1;
  }
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  if (rank == world - 1) {
    if (mode == "exit") std::_Exit(0);  // no MPI_Finalize, no goodbye: like a crash
    std::this_thread::sleep_for(std::chrono::seconds(6));  // answers health queries meanwhile
    return 0;
  }
  auto stream = (*device)->CreateStream();
  std::vector<float> x(1000, 1.0f);
  void* buf = *(*device)->Allocate(x.size() * sizeof(float));
  std::memcpy(buf, x.data(), x.size() * sizeof(float));
  const auto t0 = std::chrono::steady_clock::now();
  Status s =
      (*comm)->AllReduce(*stream, buf, buf, x.size(), DType::kFloat32, ReduceOp::kSum, nullptr);
  if (s.ok()) s = stream->Synchronize();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string last = "rank " + std::to_string(world - 1);
  const std::string reason = mode == "exit" ? "did not answer" : "has not called it";
  const bool ok = s.code() == StatusCode::kAborted &&
                  s.message().find("all_reduce #1") != std::string::npos &&
                  s.message().find(last + " " + reason) != std::string::npos;
  std::printf("%s rank %d after %.1f s: %s\n", ok ? "FAULT_OK" : "FAULT_BAD", rank, elapsed,
              s.ToString().c_str());
  std::fflush(stdout);
  return 0;
}
