// Embedding: out[i, :] = weight[ids[i], :]; backward scatter-adds dout into the weight's
// gradient (no input gradient). Ids are int32 in device memory and must stay valid until
// Backward.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace strata::nn {

class Embedding final : public Module {
 public:
  Embedding(std::string local_name, int64_t num_embeddings, int64_t dim, DType dtype);
  const char* type_name() const override { return "Embedding"; }
  Parameter& weight() { return w_; }

  // ids [n] -> out [n, dim]
  Status Forward(const RunContext& ctx, const int32_t* ids, int64_t n, const Tensor& out);
  // dout [n, dim] -> weight.grad += scatter
  Status Backward(const RunContext& ctx, const Tensor& dout);

 private:
  Parameter w_;
  const int32_t* ids_ = nullptr;
  int64_t n_ = 0;
};

}  // namespace strata::nn
