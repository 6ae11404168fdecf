#include "nn/tensor/tensor.h"

namespace strata::nn {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (ndim_ == kMaxDims) break;
    dims_[static_cast<size_t>(ndim_++)] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.ndim_ != b.ndim_) return false;
  for (int i = 0; i < a.ndim_; ++i) {
    if (a.dims_[static_cast<size_t>(i)] != b.dims_[static_cast<size_t>(i)]) return false;
  }
  return true;
}

}  // namespace strata::nn
