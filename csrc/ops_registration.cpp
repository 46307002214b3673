// Schemas of the vitplast ops and the Python module shell of the extension.
// Device implementations register themselves with TORCH_LIBRARY_IMPL:
// csrc/cpu/*.cpp for CPU, csrc/cuda/*.cu for CUDA (separate extension).
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(vitplast, m) {
  // (B, ...) x (B, ...) -> (B,) float64: sum over non-batch elements of (a - b)^2 (inputs float32,
  // float16 or bfloat16; float64 so that every square of a float32 difference is representable).
  m.def("pair_sq_distances(Tensor a, Tensor b) -> Tensor");
  // G pairs of (B, ...) tensors (widths may differ, B shared) -> (G, B) float64.
  m.def("pair_sq_distances_grouped(Tensor[] a, Tensor[] b) -> Tensor");
}

// The module holds no Python functions: importing it registers the ops.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
