// Linear: y[N, out] = x[N, in] W^T (+ b) with W [out, in] (PyTorch's layout) and an optional bias
// b [out] (Qwen2's q/k/v projections). Backward: dx = dy W (overwritten, or added when
// accumulate_input_grad — for projections that share an input, like q/k/v), dW += dy^T x,
// db += sum over tokens of dy (each written into a fresh slot instead: nn/tensor/parameter.h).
// The bias is a parameter like the weight ("<name>.bias", registered after "<name>.weight", as
// PyTorch's named_parameters() lists them). Keeps a view of x until Backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/modules/layers/module.h"
#include "nn/tensor/device_buffer.h"

namespace strata::nn {

class Linear final : public UnaryModule {
 public:
  Linear(std::string local_name, int64_t in_features, int64_t out_features, DType dtype,
         bool bias = false);
  // A head sharing another module's weight (tied embeddings): `shared` is not registered here
  // (NamedParameters lists it once, under its owner) but declared as an external parameter.
  Linear(std::string local_name, Parameter* shared);

  const char* type_name() const override { return "Linear"; }
  Parameter& weight() { return *w_; }
  // nullptr when the layer has no bias.
  Parameter* bias() { return bias_.get(); }
  void set_accumulate_input_grad(bool on) { accumulate_dx_ = on; }

 protected:
  // x [N, in] -> y [N, out]
  Status DoForward(const RunContext& ctx, const Tensor& x, const Tensor& y) override;
  // dy [N, out] -> dx [N, in]
  Status DoBackward(const RunContext& ctx, const Tensor& dy, const Tensor& dx) override;

 private:
  // A column of n ones (the bias is added as ones[n, 1] b[1, out], and its gradient is
  // dy^T ones: two GEMMs, so every backend and gradient dtype is handled by Gemm).
  Status EnsureOnes(const RunContext& ctx, int64_t n);

  Parameter own_;
  Parameter* w_;
  std::unique_ptr<Parameter> bias_;
  DeviceBuffer ones_;
  int64_t ones_n_ = 0;
  Tensor x_;
  bool accumulate_dx_ = false;
};

}  // namespace strata::nn
