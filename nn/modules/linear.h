// Linear (no bias): y[N, out] = x[N, in] W^T with W [out, in] (PyTorch's layout). Backward:
// dx = dy W (overwritten, or added when accumulate_input_grad — for projections that share an
// input, like q/k/v), dW += dy^T x (dW = dy^T x into a fresh slot: nn/tensor/parameter.h). Keeps a
// view of x until Backward.
#pragma once

#include <cstdint>
#include <string>

#include "nn/modules/module.h"

namespace strata::nn {

class Linear final : public UnaryModule {
 public:
  Linear(std::string local_name, int64_t in_features, int64_t out_features, DType dtype);
  // A head sharing another module's weight (tied embeddings): `shared` is not registered here
  // (NamedParameters lists it once, under its owner) but declared as an external parameter.
  Linear(std::string local_name, Parameter* shared);

  const char* type_name() const override { return "Linear"; }
  Parameter& weight() { return *w_; }
  void set_accumulate_input_grad(bool on) { accumulate_dx_ = on; }

 protected:
  // x [N, in] -> y [N, out]
  Status DoForward(const RunContext& ctx, const Tensor& x, const Tensor& y) override;
  // dy [N, out] -> dx [N, in]
  Status DoBackward(const RunContext& ctx, const Tensor& dy, const Tensor& dx) override;

 private:
  Parameter own_;
  Parameter* w_;
  Tensor x_;
  bool accumulate_dx_ = false;
};

}  // namespace strata::nn
