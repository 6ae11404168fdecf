// Tensor: a non-owning view of a contiguous, row-major array — a pointer, a dtype and up to four
// dimensions — in device memory (of the Device the ops run on) or in host memory.
//
// Tensors do not own storage: parameters are placed by whoever owns them (Parameter), activations
// by the module that saves them (DeviceBuffer). Element types are the floating types of
// core/dtype.h; token ids are plain int32 arrays passed next to tensors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace strata::nn {

inline constexpr int kMaxDims = 4;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const;
  // "[2, 3, 4]".
  std::string ToString() const;
  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;

  Tensor() = default;
  Tensor(void* d, DType t, Shape s) : data(d), dtype(t), shape(s) {}

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * DTypeBytes(dtype); }
  float* f32() const { return static_cast<float*>(data); }
  // The same storage seen with another shape of equal numel (checked by the caller).
  Tensor Reshaped(Shape s) const { return Tensor(data, dtype, s); }
};

}  // namespace strata::nn
