// Parameter: a named weight with a gradient slot. Its storage is placed by its owner — a
// ParameterStorage for standalone use (tests, benchmarks), later the engine, which swaps,
// partitions and releases it — through set_data / set_grad; the Parameter never allocates.
//
// Gradients accumulate: every backward adds (+=) into grad(), in grad_dtype(), so micro-batches
// sum until the owner zeroes the slot (ParameterStorage::ZeroGrads or the engine), or hands it a
// fresh slot (Note [Fresh gradient slots]): the first backward then writes it. A parameter
// whose data() is null is "released" (ZeRO-3 between uses): running a module that reads it is a
// FailedPrecondition naming it, so a missing gather is an error, not a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "nn/tensor/tensor.h"
#include "offload/device/api/stream.h"

namespace strata::nn {

class Parameter {
 public:
  Parameter(Shape shape, DType dtype) : shape_(shape), dtype_(dtype) {}
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  // Hugging Face's full name ("model.layers.3.mlp.down_proj.weight"), set when the module tree
  // is named (Module::AssignNames); the local name ("weight") until then.
  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return shape_.numel(); }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * DTypeBytes(dtype_); }

  // Storage, in memory of the device the model runs on (host-accessible on HostDevice).
  void* data() const { return data_; }
  void set_data(void* data) { data_ = data; }
  Tensor tensor() const { return Tensor(data_, dtype_, shape_); }

  // The gradient slot: numel() elements of grad_dtype(); null = this parameter's gradient is
  // not wanted (frozen), and backward skips it.
  void* grad() const { return grad_; }
  DType grad_dtype() const { return grad_dtype_; }
  void set_grad(void* grad, DType grad_dtype, bool fresh = false) {
    grad_ = grad;
    grad_dtype_ = grad_dtype;
    grad_fresh_ = fresh && grad != nullptr;
  }
  // Note [Fresh gradient slots]
  // A fresh slot holds no gradient yet and is not zeroed (its bytes are whatever they were): the
  // next backward contribution writes it (=) instead of adding (+=) and clears the mark, so an
  // owner that hands out a new slot per backward pass (the engine's stage 3 slots) saves a
  // zeroing pass over every gradient. A GEMM writes with beta = 0, which OpenBLAS runs as "zero
  // C, then add the product", the same bits as zeroing first; the small writers (RMSNorm, the
  // embedding's scatter-add) zero the slot first (ZeroGradIfFresh). The owner zeroes a slot that
  // is still fresh when the pass is over (no module wrote it) before reading it.
  bool grad_fresh() const { return grad_fresh_; }
  void mark_grad_written() { grad_fresh_ = false; }
  Tensor grad_tensor() const { return Tensor(grad_, grad_dtype_, shape_); }

  // Note [Touched rows]
  // A module that reads and writes only some rows of a [rows, cols] parameter in a pass (the
  // embedding: the rows of the batch's token ids) lists them, sorted and unique, before its
  // forward hooks run; empty means every row (set again by each forward). The owner may then move
  // only those rows: the engine's stage-3 gather at one rank copies only them to the device (the
  // other rows of the gathered buffer are not valid: only that module may read it), and when the
  // owner also sets grad_rows_only, the module zeroes only those rows of a fresh gradient slot
  // (the rest holds no gradient and is never read: the owner copies only the touched rows off the
  // device and knows every other row's gradient is zero).
  std::span<const int32_t> touched_rows() const { return touched_rows_; }
  void set_touched_rows(std::vector<int32_t> rows) { touched_rows_ = std::move(rows); }
  bool grad_rows_only() const { return grad_rows_only_ && !touched_rows_.empty(); }
  void set_grad_rows_only(bool on) { grad_rows_only_ = on; }
  // Index in the root module's NamedParameters() order (-1 before naming).
  int64_t index() const { return index_; }

  // OK if data() is set, else FailedPrecondition naming the parameter and `what` needs it.
  Status CheckPlaced(const char* what) const;

 private:
  friend class Module;
  std::string name_;
  Shape shape_;
  DType dtype_;
  void* data_ = nullptr;
  void* grad_ = nullptr;
  DType grad_dtype_ = DType::kFloat32;
  bool grad_fresh_ = false;
  bool grad_rows_only_ = false;
  std::vector<int32_t> touched_rows_;
  int64_t index_ = -1;
};

// A fresh gradient slot (Note [Fresh gradient slots]) is zeroed on `stream` and marked written,
// so the caller can add into it (only the touched rows when grad_rows_only: Note [Touched
// rows]); any other slot is left as it is.
Status ZeroGradIfFresh(const Stream& stream, Parameter& p);

// Consecutive rows [first, first + count) of a sorted, unique row list, merged.
struct RowRun {
  int64_t first = 0, count = 0;
};
std::vector<RowRun> RowRuns(std::span<const int32_t> rows);

// Copies `numel` host elements of `src_dtype` into p.data(), converting to p.dtype() (round to
// nearest even). Synchronous: returns when the data is on the device. InvalidArgument naming the
// parameter if numel differs.
Status UploadParameter(const Stream& stream, const Parameter& p, const void* src, DType src_dtype,
                       size_t numel);
// Copies p.data() (or p.grad() if `grad`) to host memory as `dst_dtype`. Synchronous.
Status DownloadParameter(const Stream& stream, const Parameter& p, void* dst, DType dst_dtype,
                         bool grad = false);

}  // namespace strata::nn
