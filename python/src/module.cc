// strata._C: the compiled half of the `strata` Python package (python/strata/ is the rest).
#include <pybind11/pybind11.h>

namespace strata::python {
void RegisterAio(pybind11::module_& m);
void RegisterOptim(pybind11::module_& m);
}  // namespace strata::python

PYBIND11_MODULE(_C, m) {
  m.doc() = "Strata's async NVMe I/O and SIMD CPU optimizers (use strata.aio, strata.optim)";
  strata::python::RegisterAio(m);
  strata::python::RegisterOptim(m);
}
