// RMSNorm (Llama's): y = x / sqrt(mean(x^2) + eps) * w over the last dimension, statistics in
// fp32. Keeps a view of x and its own per-row 1/rms buffer until Backward; dx overwritten,
// dw += .
#pragma once

#include <cstdint>
#include <string>

#include "nn/modules/layers/module.h"
#include "nn/tensor/device_buffer.h"

namespace strata::nn {

class RmsNorm final : public UnaryModule {
 public:
  RmsNorm(std::string local_name, int64_t dim, double eps, DType dtype);
  const char* type_name() const override { return "RMSNorm"; }
  Parameter& weight() { return w_; }

 protected:
  // x [N, dim] -> y [N, dim]
  Status DoForward(const RunContext& ctx, const Tensor& x, const Tensor& y) override;
  Status DoBackward(const RunContext& ctx, const Tensor& dy, const Tensor& dx) override;

 private:
  Parameter w_;
  float eps_;
  Tensor x_;
  int64_t rows_ = 0;
  DeviceBuffer rstd_;
};

}  // namespace strata::nn
