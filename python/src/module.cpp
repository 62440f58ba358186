// NB_MODULE(_kvevict): the exception type and the bindings of bindings.h.
// kvevict::Error becomes kvevict.Error, a ValueError subclass carrying the C++ message unchanged
// (bad input is the only way the library throws).
#include "bindings.h"
#include "kvevict/error.h"

NB_MODULE(_kvevict, m) {
  namespace py = kvevict::python;
  m.doc() =
      "kvevict's C++ kernels on DLPack arrays (numpy, torch CPU / CUDA); use the kvevict "
      "package, not this module";
  nanobind::exception<kvevict::Error>(m, "Error", PyExc_ValueError);
  py::bind_selection(m);
  py::bind_options(m);
  py::bind_host_ops(m);
  py::bind_cuda_ops(m);
  py::bind_evictors(m);
}
