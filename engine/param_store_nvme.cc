// ParamStore on NVMe (offload_param.device = nvme) through swap/ParamSwapper.
#include "engine/param_store.h"

namespace strata {

Result<std::unique_ptr<ParamStore>> CreateNvmeParamStore(const ParamStoreOptions& options) {
  (void)options;
  return UnimplementedError(
      "zero_optimization.offload_param.device = nvme: not built yet (use cpu or none)");
}

}  // namespace strata
