// BufferRef: the memory of a Python tensor-like object, taken without linking libtorch.
//
// Accepted, in this order:
//  1. PyTorch tensors, through their Python API only (data_ptr(), numel(), element_size(),
//     dtype, layout, is_contiguous(), device) - so the module works with any torch version.
//     Only dense, contiguous CPU tensors; a CUDA tensor is a clear ValueError.
//  2. Objects with `__array_interface__` (NumPy arrays and friends), C-contiguous.
//  3. Objects with the buffer protocol (bytearray, memoryview, array.array...), C-contiguous.
// A BufferRef holds a reference to the object (and, for 3, the exported Py_buffer), so the memory
// stays alive while the ref lives. It must be created and destroyed with the GIL held; its
// `data` may be used without the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace strata::python {

struct BufferRef {
  void* data = nullptr;
  size_t numel = 0;
  size_t element_size = 1;
  // fp32 / fp16 / bf16 when the element type is one of them, else nullopt (fine for I/O).
  std::optional<DType> dtype;
  std::string dtype_name;  // "torch.float32", "<f4", "f"... for messages
  bool writable = true;
  pybind11::object owner;               // keeps the memory alive
  std::shared_ptr<Py_buffer> exported;  // buffer-protocol view, released with the GIL held

  size_t size_bytes() const { return numel * element_size; }
};

// Takes `obj`'s memory. `what` names the argument in errors ("tensor", "grad"...). With
// `need_writable`, read-only memory is a ValueError. Raises TypeError when `obj` is none of
// the accepted kinds and ValueError when it is one but unusable (device, layout, contiguity).
BufferRef GetBuffer(pybind11::handle obj, const char* what, bool need_writable);

// The file path of a str / bytes / os.PathLike argument.
std::string GetPath(pybind11::handle obj);

}  // namespace strata::python
