// Python module shell of the CUDA extension vitplast_kernels._C_cuda. Importing it (after _C, which
// defines the op schemas) registers the CUDA implementations (TORCH_LIBRARY_IMPL in
// pair_sq_distances_cuda.cu); the module itself holds no Python functions.
#include <Python.h>

extern "C" PyObject* PyInit__C_cuda(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C_cuda", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
