#include "nn/tensor/parameter_storage.h"

#include "offload/device/api/kernels.h"

namespace strata::nn {
namespace {
constexpr size_t kAlign = 256;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Result<std::unique_ptr<ParameterStorage>> ParameterStorage::Create(Device* device,
                                                                   std::vector<Parameter*> params,
                                                                   bool grads, DType grad_dtype,
                                                                   const Stream& stream) {
  std::unique_ptr<ParameterStorage> s(new ParameterStorage());
  s->params_ = std::move(params);
  s->grad_dtype_ = grad_dtype;
  size_t data_bytes = 0, grad_bytes = 0;
  for (const Parameter* p : s->params_) {
    data_bytes += RoundUp(p->size_bytes());
    grad_bytes += RoundUp(static_cast<size_t>(p->numel()) * DTypeBytes(grad_dtype));
  }
  STRATA_ASSIGN_OR_RETURN(s->data_, DeviceBuffer::Allocate(device, data_bytes, "parameters"));
  if (grads) {
    STRATA_ASSIGN_OR_RETURN(s->grad_, DeviceBuffer::Allocate(device, grad_bytes, "gradients"));
  }
  size_t d = 0, g = 0;
  for (Parameter* p : s->params_) {
    p->set_data(static_cast<char*>(s->data_.data()) + d);
    d += RoundUp(p->size_bytes());
    if (grads) {
      p->set_grad(static_cast<char*>(s->grad_.data()) + g, grad_dtype);
      g += RoundUp(static_cast<size_t>(p->numel()) * DTypeBytes(grad_dtype));
    }
  }
  if (grads) STRATA_RETURN_IF_ERROR(s->ZeroGrads(stream));
  return s;
}

ParameterStorage::~ParameterStorage() {
  for (Parameter* p : params_) {
    if (p->data() >= data_.data() && p->data() < static_cast<char*>(data_.data()) + data_.size()) {
      p->set_data(nullptr);
    }
    if (grad_.data() != nullptr && p->grad() >= grad_.data() &&
        p->grad() < static_cast<char*>(grad_.data()) + grad_.size()) {
      p->set_grad(nullptr, p->grad_dtype());
    }
  }
}

Status ParameterStorage::ZeroGrads(const Stream& stream) {
  if (grad_.data() == nullptr) return Status::Ok();
  // The buffer holds whole elements of grad_dtype_ (each slot is rounded to 256 bytes).
  STRATA_RETURN_IF_ERROR(
      LaunchFill(stream, grad_.data(), grad_dtype_, 0.0f, grad_.size() / DTypeBytes(grad_dtype_)));
  return stream.Synchronize();
}

}  // namespace strata::nn
