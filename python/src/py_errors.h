// The seam between Strata's Status and Python exceptions.
//
// Library code below returns Status; the binding is the one place that turns a failure into a
// Python exception (pybind11 needs C++ exceptions to carry them out of a bound function).
// Failures of an I/O request become OSError(errno, message, filename) with an extra `offset`
// attribute (the request's file offset); argument errors ValueError; out of memory MemoryError;
// everything else RuntimeError whose text starts with the status code name.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata::python {

// Throws the Python exception for a failed status (never returns). `st` must not be OK.
[[noreturn]] void ThrowStatus(const Status& st);

// Throws OSError(errno, st.message(), path) with `offset` set: the errno the status came from,
// else one matching its code (EIO for IoError and DataLoss, ENOENT, EINVAL, ENOMEM).
[[noreturn]] void ThrowIoError(const Status& st, const std::string& path, uint64_t offset);

// Throws for a failed status; does nothing for OK.
inline void ThrowIfError(const Status& st) {
  if (!st.ok()) ThrowStatus(st);
}

}  // namespace strata::python
