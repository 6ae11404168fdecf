#include "nn/tensor/parameter.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/half.h"
#include "offload/device/api/kernels.h"

namespace strata::nn {
namespace {

// Converts n elements between dtypes on the host.
void Convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (st == dt) {
    std::memcpy(dst, src, n * DTypeBytes(st));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    float v = 0;
    switch (st) {
      case DType::kFloat32:
        v = static_cast<const float*>(src)[i];
        break;
      case DType::kBFloat16:
        v = Bf16ToFloat(static_cast<const uint16_t*>(src)[i]);
        break;
      case DType::kFloat16:
        v = Fp16ToFloat(static_cast<const uint16_t*>(src)[i]);
        break;
    }
    switch (dt) {
      case DType::kFloat32:
        static_cast<float*>(dst)[i] = v;
        break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(dst)[i] = FloatToBf16(v);
        break;
      case DType::kFloat16:
        static_cast<uint16_t*>(dst)[i] = FloatToFp16(v);
        break;
    }
  }
}

}  // namespace

Status Parameter::CheckPlaced(const char* what) const {
  if (data_ != nullptr) return Status::Ok();
  return FailedPreconditionError(std::string(what) + ": parameter " + name_ + " " +
                                 shape_.ToString() +
                                 " has no storage (not placed, or released and not gathered)");
}

Status UploadParameter(const Stream& stream, const Parameter& p, const void* src, DType src_dtype,
                       size_t numel) {
  if (numel != static_cast<size_t>(p.numel())) {
    return InvalidArgumentError("upload " + p.name() + ": " + std::to_string(numel) +
                                " elements given, the parameter " + p.shape().ToString() + " has " +
                                std::to_string(p.numel()));
  }
  STRATA_RETURN_IF_ERROR(p.CheckPlaced("upload"));
  const void* host = src;
  std::vector<uint8_t> converted;
  if (src_dtype != p.dtype()) {
    converted.resize(p.size_bytes());
    Convert(src, src_dtype, converted.data(), p.dtype(), numel);
    host = converted.data();
  }
  STRATA_RETURN_IF_ERROR(stream.CopyAsync(p.data(), host, p.size_bytes(), CopyKind::kHostToDevice));
  return stream.Synchronize();
}

Status ZeroGradIfFresh(const Stream& stream, Parameter& p) {
  if (!p.grad_fresh()) return Status::Ok();
  if (p.grad_rows_only() && p.shape().ndim() == 2) {  // Note [Touched rows]
    const size_t cols = static_cast<size_t>(p.shape()[1]);
    const size_t esize = DTypeBytes(p.grad_dtype());
    for (const RowRun& r : RowRuns(p.touched_rows())) {
      void* at = static_cast<uint8_t*>(p.grad()) + static_cast<size_t>(r.first) * cols * esize;
      STRATA_RETURN_IF_ERROR(
          LaunchFill(stream, at, p.grad_dtype(), 0.0f, static_cast<size_t>(r.count) * cols));
    }
  } else {
    STRATA_RETURN_IF_ERROR(
        LaunchFill(stream, p.grad(), p.grad_dtype(), 0.0f, static_cast<size_t>(p.numel())));
  }
  p.mark_grad_written();
  return Status::Ok();
}

std::vector<RowRun> RowRuns(std::span<const int32_t> rows) {
  std::vector<RowRun> runs;
  for (int32_t r : rows) {
    if (!runs.empty() && runs.back().first + runs.back().count == r) {
      ++runs.back().count;
    } else {
      runs.push_back({r, 1});
    }
  }
  return runs;
}

Status DownloadParameter(const Stream& stream, const Parameter& p, void* dst, DType dst_dtype,
                         bool grad) {
  const void* src = grad ? p.grad() : p.data();
  const DType st = grad ? p.grad_dtype() : p.dtype();
  if (src == nullptr) {
    return FailedPreconditionError("download " + p.name() + ": no " +
                                   (grad ? "gradient slot" : "storage"));
  }
  const size_t n = static_cast<size_t>(p.numel());
  std::vector<uint8_t> staging;
  void* host = dst;
  if (st != dst_dtype) {
    staging.resize(n * DTypeBytes(st));
    host = staging.data();
  }
  STRATA_RETURN_IF_ERROR(stream.CopyAsync(host, src, n * DTypeBytes(st), CopyKind::kDeviceToHost));
  STRATA_RETURN_IF_ERROR(stream.Synchronize());
  if (st != dst_dtype) Convert(staging.data(), st, dst, dst_dtype, n);
  return Status::Ok();
}

}  // namespace strata::nn
