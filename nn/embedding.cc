#include "nn/embedding.h"

#include "nn/ops.h"

namespace strata::nn {

Embedding::Embedding(std::string local_name, int64_t num_embeddings, int64_t dim, DType dtype)
    : Module(std::move(local_name)), w_(Shape{num_embeddings, dim}, dtype) {
  RegisterParameter(&w_, "weight");
}

Status Embedding::Forward(const RunContext& ctx, const int32_t* ids, int64_t n, const Tensor& out) {
  return WithForwardHooks(*this, ctx, [&]() -> Status {
    STRATA_RETURN_IF_ERROR(w_.CheckPlaced(name().c_str()));
    const int64_t vocab = w_.shape()[0], dim = w_.shape()[1];
    if (out.numel() != n * dim) {
      return InvalidArgumentError(name() + ": out " + out.shape.ToString() + " is not [" +
                                  std::to_string(n) + ", " + std::to_string(dim) + "]");
    }
    ids_ = ids;
    n_ = n;
    return EmbeddingForward(ctx.stream, ids, n, w_.data(), w_.dtype(), vocab, dim, out.f32());
  });
}

Status Embedding::Backward(const RunContext& ctx, const Tensor& dout) {
  return WithBackwardHooks(*this, ctx, [&]() -> Status {
    if (ids_ == nullptr || dout.numel() != n_ * w_.shape()[1]) {
      return FailedPreconditionError(name() + ": backward without a matching forward");
    }
    if (w_.grad() == nullptr) return Status::Ok();
    STRATA_RETURN_IF_ERROR(ZeroGradIfFresh(ctx.stream, w_));  // Note [Fresh gradient slots]
    return EmbeddingBackward(ctx.stream, ids_, n_, dout.f32(), w_.grad(), w_.grad_dtype(),
                             w_.shape()[0], w_.shape()[1]);
  });
}

}  // namespace strata::nn
