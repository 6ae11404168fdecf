// The "local" backend: a world of one rank. Every collective is a copy (or nothing) on the
// stream, so engine code written against Communicator runs unchanged without a launcher.
#pragma once

#include <memory>

#include "engine/comm/communicator.h"

namespace strata::internal {

std::unique_ptr<Communicator> CreateLocalCommunicator();

}  // namespace strata::internal
