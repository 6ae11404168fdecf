#include "python/src/py_buffer.h"

#include <cstdint>
#include <string_view>

namespace py = pybind11;

namespace strata::python {
namespace {

std::string Str(py::handle h) { return py::str(h).cast<std::string>(); }

// "torch.float32" -> fp32 and so on.
std::optional<DType> TorchDType(std::string_view name) {
  if (name == "torch.float32") return DType::kFloat32;
  if (name == "torch.float16") return DType::kFloat16;
  if (name == "torch.bfloat16") return DType::kBFloat16;
  return std::nullopt;
}

BufferRef FromTorch(py::handle t, const char* what, bool need_writable) {
  BufferRef b;
  const std::string device = Str(t.attr("device"));
  if (Str(t.attr("device").attr("type")) != "cpu") {
    throw py::value_error(std::string(what) + " is on " + device +
                          ": strata takes CPU tensors only (copy it with .cpu(), or use "
                          "new_cpu_locked_tensor for I/O buffers)");
  }
  const std::string layout = Str(t.attr("layout"));
  if (layout != "torch.strided") {
    throw py::value_error(std::string(what) + " has layout " + layout +
                          ": only dense (torch.strided) tensors are supported");
  }
  if (!t.attr("is_contiguous")().cast<bool>()) {
    throw py::value_error(std::string(what) +
                          " is not contiguous: pass tensor.contiguous() (strata reads and writes "
                          "the tensor's memory in place)");
  }
  b.dtype_name = Str(t.attr("dtype"));
  b.dtype = TorchDType(b.dtype_name);
  b.numel = t.attr("numel")().cast<size_t>();
  b.element_size = t.attr("element_size")().cast<size_t>();
  b.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<uintptr_t>());
  (void)need_writable;  // torch tensors are always writable through data_ptr()
  b.owner = py::reinterpret_borrow<py::object>(t);
  return b;
}

// Elements in a shape tuple, and whether `strides` (None or a tuple) is C-contiguous.
bool ContiguousShape(py::handle shape, py::handle strides, size_t itemsize, size_t* numel) {
  size_t n = 1;
  for (py::handle d : shape) n *= d.cast<size_t>();
  *numel = n;
  if (strides.is_none() || n <= 1) return true;
  py::tuple st = py::reinterpret_borrow<py::tuple>(strides);
  py::tuple sh = py::reinterpret_borrow<py::tuple>(shape);
  auto expect = static_cast<int64_t>(itemsize);
  for (size_t i = sh.size(); i-- > 0;) {
    const auto dim = sh[i].cast<int64_t>();
    if (dim != 1 && st[i].cast<int64_t>() != expect) return false;
    expect *= dim;
  }
  return true;
}

BufferRef FromArrayInterface(py::handle obj, py::handle ai, const char* what, bool need_writable) {
  py::dict d = py::reinterpret_borrow<py::dict>(ai);
  py::object data = d["data"];
  if (!py::isinstance<py::tuple>(data)) {
    throw py::type_error(std::string(what) +
                         ": __array_interface__ 'data' must be a (pointer, read_only) tuple");
  }
  BufferRef b;
  b.dtype_name = d["typestr"].cast<std::string>();
  // typestr: byte order, kind, size in bytes ("<f4", "|u1", "<f2").
  const std::string& ts = b.dtype_name;
  b.element_size = ts.size() > 2 ? std::stoul(ts.substr(2)) : 1;
  if (ts.size() > 2 && ts[0] != '>' && ts[1] == 'f') {
    if (b.element_size == 4) b.dtype = DType::kFloat32;
    if (b.element_size == 2) b.dtype = DType::kFloat16;
  }
  py::object strides = d.contains("strides") ? d["strides"] : py::none();
  if (!ContiguousShape(d["shape"], strides, b.element_size, &b.numel)) {
    throw py::value_error(std::string(what) + " is not C-contiguous");
  }
  py::tuple dt = py::reinterpret_borrow<py::tuple>(data);
  b.data = reinterpret_cast<void*>(dt[0].cast<uintptr_t>());
  b.writable = !dt[1].cast<bool>();
  if (need_writable && !b.writable) {
    throw py::value_error(std::string(what) +
                          " is read-only; reading a file needs writable memory");
  }
  b.owner = py::reinterpret_borrow<py::object>(obj);
  return b;
}

BufferRef FromBufferProtocol(py::handle obj, const char* what, bool need_writable) {
  auto view = std::shared_ptr<Py_buffer>(new Py_buffer{}, [](Py_buffer* v) {
    if (v->obj != nullptr) PyBuffer_Release(v);
    delete v;
  });
  const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (need_writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), view.get(), flags) != 0) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " (" + Str(py::type::handle_of(obj)) +
                          "): its buffer is not " +
                          (need_writable ? "writable and C-contiguous" : "C-contiguous"));
  }
  BufferRef b;
  b.data = view->buf;
  b.element_size = view->itemsize > 0 ? static_cast<size_t>(view->itemsize) : 1;
  b.numel = static_cast<size_t>(view->len) / b.element_size;
  b.dtype_name = view->format != nullptr ? view->format : "B";
  std::string_view f = b.dtype_name;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f.remove_prefix(1);
  if (f == "f") b.dtype = DType::kFloat32;
  if (f == "e") b.dtype = DType::kFloat16;
  b.writable = view->readonly == 0;
  b.owner = py::reinterpret_borrow<py::object>(obj);
  b.exported = std::move(view);
  return b;
}

}  // namespace

BufferRef GetBuffer(py::handle obj, const char* what, bool need_writable) {
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "element_size") &&
      py::hasattr(obj, "is_contiguous") && py::hasattr(obj, "device")) {
    return FromTorch(obj, what, need_writable);
  }
  if (py::hasattr(obj, "__array_interface__")) {
    return FromArrayInterface(obj, obj.attr("__array_interface__"), what, need_writable);
  }
  if (PyObject_CheckBuffer(obj.ptr())) return FromBufferProtocol(obj, what, need_writable);
  throw py::type_error(std::string(what) +
                       " must be a torch.Tensor, an object with "
                       "__array_interface__ or one with the buffer protocol, not " +
                       Str(py::type::handle_of(obj)));
}

std::string GetPath(py::handle obj) {
  py::object p = py::module_::import("os").attr("fsdecode")(obj);
  return p.cast<std::string>();
}

}  // namespace strata::python
