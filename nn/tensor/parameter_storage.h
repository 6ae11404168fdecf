// ParameterStorage: places a module tree's parameters (and optionally their gradients) in two
// flat device buffers — llm.c's "parameters in one flat buffer with named views" — for
// standalone use: tests, benchmarks, inference. The engine places parameters itself instead.
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "nn/tensor/device_buffer.h"
#include "nn/tensor/parameter.h"
#include "offload/device/api/device.h"

namespace strata::nn {

class ParameterStorage {
 public:
  // Sets every parameter's data (each 256-byte aligned in one buffer) and, if `grads`, its
  // gradient slot in `grad_dtype` (zeroed). OutOfMemory (device) if they do not fit.
  static Result<std::unique_ptr<ParameterStorage>> Create(Device* device,
                                                          std::vector<Parameter*> params,
                                                          bool grads, DType grad_dtype,
                                                          const Stream& stream);
  // Clears the parameters' pointers and frees the buffers (no work may still use them).
  ~ParameterStorage();

  Status ZeroGrads(const Stream& stream);
  size_t data_bytes() const { return data_.size(); }
  size_t grad_bytes() const { return grad_.size(); }

 private:
  ParameterStorage() = default;
  std::vector<Parameter*> params_;
  DeviceBuffer data_;
  DeviceBuffer grad_;
  DType grad_dtype_ = DType::kFloat32;
};

}  // namespace strata::nn
