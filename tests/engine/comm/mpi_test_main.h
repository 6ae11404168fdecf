// Shared pieces of the multi-rank suites run under mpirun: the communicator and device every test
// uses, and a main that prints only rank 0's progress (other ranks print their failures).
#pragma once

#include <memory>

#include "engine/comm/communicator.h"
#include "offload/device/api/device.h"

namespace strata::testing {

// The world communicator (mpi backend, size checks on, timeout 60 s) and a HostDevice, made once.
Communicator& World();
Device& TestDevice();

}  // namespace strata::testing
