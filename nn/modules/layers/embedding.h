// Embedding: out[i, :] = weight[ids[i], :]; backward scatter-adds dout into the weight's
// gradient (no input gradient) and does not read the weight. Ids are int32 in device memory and
// must stay valid until Backward; given the same ids on the host too, the forward lists the rows
// it touches on the weight (Note [Touched rows] in nn/tensor/parameter.h), so an owner may move
// only those.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "nn/modules/layers/module.h"

namespace strata::nn {

class Embedding final : public Module {
 public:
  Embedding(std::string local_name, int64_t num_embeddings, int64_t dim, DType dtype);
  const char* type_name() const override { return "Embedding"; }
  Parameter& weight() { return w_; }

  bool BackwardReadsParameters() const override { return false; }

  // ids [n] -> out [n, dim]; host_ids, if given, are the same n ids in host memory.
  Status Forward(const RunContext& ctx, const int32_t* ids, int64_t n, const Tensor& out,
                 std::span<const int32_t> host_ids = {});
  // dout [n, dim] -> weight.grad += scatter
  Status Backward(const RunContext& ctx, const Tensor& dout);

 private:
  Parameter w_;
  const int32_t* ids_ = nullptr;
  int64_t n_ = 0;
};

}  // namespace strata::nn
