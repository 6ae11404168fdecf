#include "nn/modules/layers/linear.h"

#include "nn/ops/ops.h"
#include "offload/device/api/kernels.h"

namespace strata::nn {

Linear::Linear(std::string local_name, int64_t in_features, int64_t out_features, DType dtype,
               bool bias)
    : UnaryModule(std::move(local_name)), own_(Shape{out_features, in_features}, dtype), w_(&own_) {
  RegisterParameter(&own_, "weight");
  if (bias) {
    bias_ = std::make_unique<Parameter>(Shape{out_features}, dtype);
    RegisterParameter(bias_.get(), "bias");
  }
}

Linear::Linear(std::string local_name, Parameter* shared)
    : UnaryModule(std::move(local_name)), own_(Shape{}, shared->dtype()), w_(shared) {
  UseExternalParameter(shared);
}

Status Linear::EnsureOnes(const RunContext& ctx, int64_t n) {
  if (ones_n_ >= n) return Status::Ok();
  STRATA_RETURN_IF_ERROR(ctx.stream.Synchronize());  // earlier work may still read the old one
  ones_.Reset();
  ones_n_ = 0;
  STRATA_ASSIGN_OR_RETURN(ones_,
                          DeviceBuffer::Allocate(ctx.device, static_cast<size_t>(n) * sizeof(float),
                                                 name() + " bias ones"));
  STRATA_RETURN_IF_ERROR(
      LaunchFill(ctx.stream, ones_.data(), DType::kFloat32, 1.0f, static_cast<size_t>(n)));
  ones_n_ = n;
  return ctx.stream.Synchronize();  // a later pass may run on another stream
}

Status Linear::DoForward(const RunContext& ctx, const Tensor& x, const Tensor& y) {
  STRATA_RETURN_IF_ERROR(w_->CheckPlaced(name().c_str()));
  if (bias_ != nullptr) STRATA_RETURN_IF_ERROR(bias_->CheckPlaced(name().c_str()));
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
  STRATA_RETURN_IF_ERROR(Gemm(ctx.stream, g));
  if (bias_ == nullptr) return Status::Ok();
  STRATA_RETURN_IF_ERROR(EnsureOnes(ctx, n));
  GemmArgs b;  // y [n, out] += ones [n, 1] b [1, out]
  b.m = n, b.n = out, b.k = 1;
  b.a = ones_.data(), b.lda = 1;
  b.b = bias_->data(), b.b_dtype = bias_->dtype(), b.ldb = out;
  b.c = y.data, b.ldc = out;
  b.beta = 1.0f;
  return Gemm(ctx.stream, b);
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
  if (bias_ != nullptr && bias_->grad() != nullptr) {
    STRATA_RETURN_IF_ERROR(EnsureOnes(ctx, n));
    const bool write = bias_->grad_fresh() && bias_->grad_dtype() == DType::kFloat32;
    if (!write) STRATA_RETURN_IF_ERROR(ZeroGradIfFresh(ctx.stream, *bias_));
    GemmArgs g;  // db [out, 1] (+)= dy^T [out, n] ones [n, 1]
    g.trans_a = true;
    g.m = out, g.n = 1, g.k = n;
    g.a = dy.data, g.lda = out;
    g.b = ones_.data(), g.ldb = 1;
    g.c = bias_->grad(), g.c_dtype = bias_->grad_dtype(), g.ldc = 1;
    g.beta = write ? 0.0f : 1.0f;
    STRATA_RETURN_IF_ERROR(Gemm(ctx.stream, g));
    bias_->mark_grad_written();
  }
  return Status::Ok();
}

}  // namespace strata::nn
