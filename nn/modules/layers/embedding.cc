#include "nn/modules/layers/embedding.h"

#include <algorithm>
#include <string>
#include <vector>

#include "nn/ops/ops.h"

namespace strata::nn {

Embedding::Embedding(std::string local_name, int64_t num_embeddings, int64_t dim, DType dtype)
    : Module(std::move(local_name)), w_(Shape{num_embeddings, dim}, dtype) {
  RegisterParameter(&w_, "weight");
}

Status Embedding::Forward(const RunContext& ctx, const int32_t* ids, int64_t n, const Tensor& out,
                          std::span<const int32_t> host_ids) {
  // Note [Touched rows]: set before the hooks, which may gather only these rows.
  std::vector<int32_t> rows;
  if (static_cast<int64_t>(host_ids.size()) == n) {
    const int64_t vocab = w_.shape()[0];
    for (size_t i = 0; i < host_ids.size(); ++i) {
      if (host_ids[i] < 0 || host_ids[i] >= vocab) {
        return InvalidArgumentError(name() + ": token id " + std::to_string(host_ids[i]) +
                                    " at position " + std::to_string(i) + " is outside [0, " +
                                    std::to_string(vocab) + ")");
      }
    }
    rows.assign(host_ids.begin(), host_ids.end());
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  } else if (!host_ids.empty()) {
    return InvalidArgumentError(name() + ": " + std::to_string(host_ids.size()) + " host ids for " +
                                std::to_string(n) + " device ids");
  }
  w_.set_touched_rows(std::move(rows));
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
