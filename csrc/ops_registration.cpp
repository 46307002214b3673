// Schemas of the vitplast ops and the Python module shell of the extension.
// Device implementations register themselves with TORCH_LIBRARY_IMPL:
// csrc/cpu/*.cpp for CPU, csrc/cuda/*.cu for CUDA (separate extension).
#include <Python.h>
#include <torch/library.h>

#include "ops.h"

namespace vitplast {

void check_pair_inputs(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() >= 2, "vitplast: a must have at least 2 dims (B, ...), got ", a.dim());
  TORCH_CHECK(a.sizes() == b.sizes(), "vitplast: a and b must have the same shape, got ",
              a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "vitplast: a and b must have the same dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.device() == b.device(), "vitplast: a and b must be on the same device");
  auto st = a.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kHalf || st == at::kBFloat16,
              "vitplast: dtype must be float32, float16 or bfloat16, got ", st);
}

}  // namespace vitplast

TORCH_LIBRARY(vitplast, m) {
  // (B, ...) x (B, ...) -> (B,) float32: sum over non-batch elements of (a - b)^2.
  m.def("pair_sq_distances(Tensor a, Tensor b) -> Tensor");
  // G pairs of (B, ...) tensors (widths may differ, B shared) -> (G, B) float32.
  m.def("pair_sq_distances_grouped(Tensor[] a, Tensor[] b) -> Tensor");
}

// The module holds no Python functions: importing it registers the ops.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
