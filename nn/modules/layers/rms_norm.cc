#include "nn/modules/layers/rms_norm.h"

#include "nn/ops/ops.h"

namespace strata::nn {

RmsNorm::RmsNorm(std::string local_name, int64_t dim, double eps, DType dtype)
    : UnaryModule(std::move(local_name)), w_(Shape{dim}, dtype), eps_(static_cast<float>(eps)) {
  RegisterParameter(&w_, "weight");
}

Status RmsNorm::DoForward(const RunContext& ctx, const Tensor& x, const Tensor& y) {
  STRATA_RETURN_IF_ERROR(w_.CheckPlaced(name().c_str()));
  const int64_t dim = w_.numel();
  const int64_t n = x.numel() / dim;
  if (x.numel() != n * dim || y.numel() != x.numel()) {
    return InvalidArgumentError(name() + ": x " + x.shape.ToString() + " / y " +
                                y.shape.ToString() + " do not match dim " + std::to_string(dim));
  }
  if (rstd_.size() < static_cast<size_t>(n) * sizeof(float)) {
    STRATA_RETURN_IF_ERROR(ctx.stream.Synchronize());
    STRATA_ASSIGN_OR_RETURN(
        rstd_, DeviceBuffer::Allocate(ctx.device, n * sizeof(float), name() + " rstd"));
  }
  x_ = x;
  rows_ = n;
  return RmsNormForward(ctx.stream, x.f32(), w_.data(), w_.dtype(), n, dim, eps_, y.f32(),
                        rstd_.f32());
}

Status RmsNorm::DoBackward(const RunContext& ctx, const Tensor& dy, const Tensor& dx) {
  STRATA_RETURN_IF_ERROR(w_.CheckPlaced(name().c_str()));
  const int64_t dim = w_.numel();
  if (x_.empty() || dy.numel() != rows_ * dim) {
    return FailedPreconditionError(name() + ": backward without a matching forward");
  }
  STRATA_RETURN_IF_ERROR(ZeroGradIfFresh(ctx.stream, w_));  // Note [Fresh gradient slots]
  return RmsNormBackward(ctx.stream, x_.f32(), w_.data(), w_.dtype(), rstd_.f32(), dy.f32(), rows_,
                         dim, dx.empty() ? nullptr : dx.f32(), w_.grad(), w_.grad_dtype());
}

}  // namespace strata::nn
