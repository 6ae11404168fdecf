#include "offload/device/api/kernels.h"

#include <string>

#include "offload/device/api/device.h"

namespace strata {
namespace {

Status Enqueue(const Stream& stream, const KernelLaunch& k) {
  if (!stream.valid()) {
    return FailedPreconditionError(std::string(KernelOpName(k.op)) + ": empty stream handle");
  }
  if (k.numel == 0 && k.op != KernelOp::kL2NormPartials) return Status::Ok();
  STRATA_RETURN_IF_ERROR(ValidateKernelLaunch(k));
  return stream.device()->LaunchKernel(stream, k);
}

bool Aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

const char* KernelOpName(KernelOp op) {
  switch (op) {
    case KernelOp::kCast:
      return "cast";
    case KernelOp::kScale:
      return "scale";
    case KernelOp::kAdd:
      return "add";
    case KernelOp::kFill:
      return "fill";
    case KernelOp::kCheckFinite:
      return "check_finite";
    case KernelOp::kL2NormPartials:
      return "l2norm_partials";
  }
  return "?";
}

Status ValidateKernelLaunch(const KernelLaunch& k) {
  const std::string name = KernelOpName(k.op);
  auto bad = [&](const std::string& why) { return InvalidArgumentError(name + ": " + why); };
  auto check_ptr = [&](const void* p, DType t, const char* what) -> Status {
    if (p == nullptr) return bad(std::string(what) + " is null");
    if (!Aligned(p, DTypeBytes(t))) {
      return bad(std::string(what) + " is not aligned to " + std::to_string(DTypeBytes(t)) +
                 " bytes (" + std::string(DTypeName(t)) + ")");
    }
    return Status::Ok();
  };
  switch (k.op) {
    case KernelOp::kCast:
      STRATA_RETURN_IF_ERROR(check_ptr(k.src, k.src_dtype, "src"));
      STRATA_RETURN_IF_ERROR(check_ptr(k.dst, k.dst_dtype, "dst"));
      if (k.src == k.dst && DTypeBytes(k.src_dtype) != DTypeBytes(k.dst_dtype)) {
        return bad("in-place cast between types of different size");
      }
      return Status::Ok();
    case KernelOp::kScale:
      STRATA_RETURN_IF_ERROR(check_ptr(k.src, k.src_dtype, "src"));
      return check_ptr(k.dst, k.dst_dtype, "dst");
    case KernelOp::kAdd:
      STRATA_RETURN_IF_ERROR(check_ptr(k.src, k.src_dtype, "a"));
      STRATA_RETURN_IF_ERROR(check_ptr(k.src2, k.src2_dtype, "b"));
      return check_ptr(k.dst, k.dst_dtype, "dst");
    case KernelOp::kFill:
      return check_ptr(k.dst, k.dst_dtype, "dst");
    case KernelOp::kCheckFinite:
      STRATA_RETURN_IF_ERROR(check_ptr(k.src, k.src_dtype, "src"));
      if (k.flag == nullptr || !Aligned(k.flag, 4)) return bad("flag is null or misaligned");
      return Status::Ok();
    case KernelOp::kL2NormPartials:
      if (k.num_partials == 0) return bad("num_partials is 0");
      if (k.numel != 0) STRATA_RETURN_IF_ERROR(check_ptr(k.src, k.src_dtype, "src"));
      if (k.partials == nullptr || !Aligned(k.partials, 4)) {
        return bad("partials is null or misaligned");
      }
      return Status::Ok();
  }
  return bad("unknown op");
}

Status LaunchCast(const Stream& stream, void* dst, DType dst_dtype, const void* src,
                  DType src_dtype, size_t numel) {
  KernelLaunch k;
  k.op = KernelOp::kCast;
  k.numel = numel;
  k.src = src;
  k.src_dtype = src_dtype;
  k.dst = dst;
  k.dst_dtype = dst_dtype;
  return Enqueue(stream, k);
}

Status LaunchScale(const Stream& stream, void* dst, DType dtype, const void* src, float alpha,
                   size_t numel) {
  KernelLaunch k;
  k.op = KernelOp::kScale;
  k.numel = numel;
  k.src = src;
  k.src_dtype = dtype;
  k.dst = dst;
  k.dst_dtype = dtype;
  k.alpha = alpha;
  return Enqueue(stream, k);
}

Status LaunchAdd(const Stream& stream, void* dst, DType dtype, const void* a, const void* b,
                 DType b_dtype, float alpha, size_t numel) {
  KernelLaunch k;
  k.op = KernelOp::kAdd;
  k.numel = numel;
  k.src = a;
  k.src_dtype = dtype;
  k.src2 = b;
  k.src2_dtype = b_dtype;
  k.dst = dst;
  k.dst_dtype = dtype;
  k.alpha = alpha;
  return Enqueue(stream, k);
}

Status LaunchFill(const Stream& stream, void* dst, DType dtype, float value, size_t numel) {
  KernelLaunch k;
  k.op = KernelOp::kFill;
  k.numel = numel;
  k.dst = dst;
  k.dst_dtype = dtype;
  k.value = value;
  return Enqueue(stream, k);
}

Status LaunchCheckFinite(const Stream& stream, uint32_t* flag, const void* src, DType dtype,
                         size_t numel) {
  KernelLaunch k;
  k.op = KernelOp::kCheckFinite;
  k.numel = numel;
  k.src = src;
  k.src_dtype = dtype;
  k.flag = flag;
  return Enqueue(stream, k);
}

Status LaunchL2NormPartials(const Stream& stream, float* partials, size_t num_partials,
                            const void* src, DType dtype, size_t numel) {
  KernelLaunch k;
  k.op = KernelOp::kL2NormPartials;
  k.numel = numel;
  k.src = src;
  k.src_dtype = dtype;
  k.partials = partials;
  k.num_partials = num_partials;
  return Enqueue(stream, k);
}

}  // namespace strata
