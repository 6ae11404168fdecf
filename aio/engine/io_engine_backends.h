// Private: factories of the two IoEngine backends (use CreateIoEngine from io_engine.h).
#pragma once

#include <memory>

#include "aio/engine/io_engine.h"

namespace strata::internal {

Result<std::unique_ptr<IoEngine>> CreateUringEngine(const IoEngineOptions& options);
Result<std::unique_ptr<IoEngine>> CreateLibaioEngine(const IoEngineOptions& options);

}  // namespace strata::internal
