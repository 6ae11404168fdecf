#include "nn/modules/linear.h"

#include "nn/ops/ops.h"

namespace strata::nn {

Linear::Linear(std::string local_name, int64_t in_features, int64_t out_features, DType dtype)
    : UnaryModule(std::move(local_name)), own_(Shape{out_features, in_features}, dtype), w_(&own_) {
  RegisterParameter(&own_, "weight");
}

Linear::Linear(std::string local_name, Parameter* shared)
    : UnaryModule(std::move(local_name)), own_(Shape{}, shared->dtype()), w_(shared) {
  UseExternalParameter(shared);
}

Status Linear::DoForward(const RunContext& ctx, const Tensor& x, const Tensor& y) {
  STRATA_RETURN_IF_ERROR(w_->CheckPlaced(name().c_str()));
  const int64_t out = w_->shape()[0], in = w_->shape()[1];
  const int64_t n = x.numel() / in;
  if (x.numel() != n * in || y.numel() != n * out) {
    return InvalidArgumentError(name() + ": x " + x.shape.ToString() + " / y " +
                                y.shape.ToString() + " do not match weight " +
                                w_->shape().ToString());
  }
  x_ = x;
  GemmArgs g;
  g.trans_b = true;
  g.m = n, g.n = out, g.k = in;
  g.a = x.data, g.lda = in;
  g.b = w_->data(), g.b_dtype = w_->dtype(), g.ldb = in;
  g.c = y.data, g.ldc = out;
  return Gemm(ctx.stream, g);
}

Status Linear::DoBackward(const RunContext& ctx, const Tensor& dy, const Tensor& dx) {
  STRATA_RETURN_IF_ERROR(w_->CheckPlaced(name().c_str()));
  const int64_t out = w_->shape()[0], in = w_->shape()[1];
  const int64_t n = dy.numel() / out;
  if (x_.empty() || x_.numel() != n * in) {
    return FailedPreconditionError(name() + ": backward without a matching forward");
  }
  if (!dx.empty()) {
    GemmArgs g;  // dx [n, in] = dy [n, out] W [out, in]
    g.m = n, g.n = in, g.k = out;
    g.a = dy.data, g.lda = out;
    g.b = w_->data(), g.b_dtype = w_->dtype(), g.ldb = in;
    g.c = dx.data, g.ldc = in;
    g.beta = accumulate_dx_ ? 1.0f : 0.0f;
    STRATA_RETURN_IF_ERROR(Gemm(ctx.stream, g));
  }
  if (w_->grad() != nullptr) {
    // A fresh fp32 slot is written (beta 0); a 16-bit one is accumulated into (Gemm's rule), so
    // it is zeroed first (Note [Fresh gradient slots]).
    const bool write = w_->grad_fresh() && w_->grad_dtype() == DType::kFloat32;
    if (!write) STRATA_RETURN_IF_ERROR(ZeroGradIfFresh(ctx.stream, *w_));
    GemmArgs g;  // dW [out, in] (+)= dy^T [out, n] x [n, in]
    g.trans_a = true;
    g.m = out, g.n = in, g.k = n;
    g.a = dy.data, g.lda = out;
    g.b = x_.data, g.ldb = in;
    g.c = w_->grad(), g.c_dtype = w_->grad_dtype(), g.ldc = in;
    g.beta = write ? 0.0f : 1.0f;
    STRATA_RETURN_IF_ERROR(Gemm(ctx.stream, g));
    w_->mark_grad_written();
  }
  return Status::Ok();
}

}  // namespace strata::nn
