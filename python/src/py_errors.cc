#include "python/src/py_errors.h"

#include <pybind11/pybind11.h>

#include <cerrno>

namespace py = pybind11;

namespace strata::python {
namespace {

int ErrnoFor(const Status& st) {
  if (st.sys_errno() != 0) return st.sys_errno();
  switch (st.code()) {
    case StatusCode::kNotFound:
      return ENOENT;
    case StatusCode::kInvalidArgument:
      return EINVAL;
    case StatusCode::kOutOfMemory:
      return ENOMEM;
    case StatusCode::kUnavailable:
    case StatusCode::kUnimplemented:
      return ENOSYS;
    default:
      return EIO;
  }
}

}  // namespace

void ThrowStatus(const Status& st) {
  const std::string text = st.ToString();
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
      throw py::value_error(text);
    case StatusCode::kOutOfMemory:
      PyErr_SetString(PyExc_MemoryError, text.c_str());
      throw py::error_already_set();
    case StatusCode::kIoError:
    case StatusCode::kNotFound:
    case StatusCode::kDataLoss: {
      py::object exc = py::reinterpret_borrow<py::object>(PyExc_OSError)(ErrnoFor(st), text);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      throw py::error_already_set();
    }
    default:
      throw std::runtime_error(text);  // pybind11 raises RuntimeError
  }
}

void ThrowIoError(const Status& st, const std::string& path, uint64_t offset) {
  // OSError(errno, strerror, filename) picks the subclass for the errno (FileNotFoundError...).
  py::object exc =
      py::reinterpret_borrow<py::object>(PyExc_OSError)(ErrnoFor(st), st.ToString(), path);
  exc.attr("offset") = offset;
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

}  // namespace strata::python
