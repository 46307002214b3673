"""Build of vitplast-kernels' compiled parts.

* ``vitplast_kernels._C``      C++ CPU kernels (OpenMP), always built.
* ``vitplast_kernels._C_cuda`` CUDA kernels, built when nvcc and a CUDA build of torch exist
  (force with ``VITPLAST_BUILD_CUDA=1``, skip with ``VITPLAST_BUILD_CUDA=0``).

torch must already be installed: build with ``pip install -e . --no-build-isolation``.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys

from setuptools import setup


def _real_cuda_home() -> None:
    """nvcc on PATH may be a wrapper script (e.g. /usr/local/bin/nvcc running /usr/local/cuda-13.0/bin/nvcc):
    torch would then take /usr/local as CUDA_HOME and not find libcudart. Point CUDA_HOME at the toolkit."""
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return
    home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    if any(glob.glob(os.path.join(home, d, "libcudart.so*")) for d in ("lib64", "lib")):
        return
    for cand in ("/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)):
        if os.path.exists(os.path.join(cand, "bin", "nvcc")) and any(
            glob.glob(os.path.join(cand, d, "libcudart.so*")) for d in ("lib64", "lib")
        ):
            os.environ["CUDA_HOME"] = cand
            return


_real_cuda_home()

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
except ImportError:  # pragma: no cover - exercised only on broken set-ups
    sys.exit(
        "vitplast-kernels: torch is not importable in this environment.\n"
        "Install it first (pip install torch==2.14.1), then build without build isolation:\n"
        "    pip install -e . --no-build-isolation\n"
        "(or simply run `make test`, which does both)."
    )

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_ARCHS = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
              "-gencode=arch=compute_90,code=compute_90"]
# IEEE float32 arithmetic in the CUDA kernels, as in the CPU and Triton kernels: no --use_fast_math,
# whose --ftz=true flushes float32 subnormals (differences below ~1.2e-38) to zero on CUDA only.
# --fmad=true keeps a*b+c contracted into one correctly rounded FMA (the kernels also call fmaf).
NVCC_MATH = ["--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--fmad=true"]


def _rel(paths: list[str]) -> list[str]:
    return sorted(os.path.relpath(p, HERE) for p in paths)


def _want_cuda() -> bool:
    flag = os.environ.get("VITPLAST_BUILD_CUDA", "auto").lower()
    if flag in ("0", "false", "no", "off"):
        return False
    sources = glob.glob(os.path.join(HERE, "csrc", "cuda", "*.cu"))
    have = bool(sources) and torch.version.cuda is not None and (
        CUDA_HOME is not None or shutil.which("nvcc") is not None
    )
    if flag in ("1", "true", "yes", "on") and not have:
        sys.exit(
            "vitplast-kernels: VITPLAST_BUILD_CUDA=1 but the CUDA extension cannot be built: "
            f"torch.version.cuda={torch.version.cuda}, CUDA_HOME={CUDA_HOME}, "
            f"nvcc on PATH={shutil.which('nvcc')}. Install a CUDA build of torch and the CUDA toolkit."
        )
    if not have:
        print("vitplast-kernels: building without the CUDA extension (no nvcc or CPU-only torch).")
    return have


# Link the C++ runtime as a shared library, ahead of anything the compiler driver adds: a toolchain
# that links libstdc++ statically by default (seen on a GPU image: /opt/gcc/bin/g++) gives the
# extension a second C++ runtime beside torch's. Reproduced here with LDFLAGS=-static-libstdc++: a
# TORCH_CHECK message came back cut at the first value torch's own operator<< printed ("got ["); on
# the GPU image the same throw crashed the process. With -lstdc++ in front the static archive is never
# needed (bench/gpu_abi_probe.sh shows NEEDED entries; tests/test_op_layer.py checks the message).
SHARED_CXX_RUNTIME = ["-lstdc++"]


def _extensions():
    cxx_flags = ["-O3", "-fopenmp"]  # the C++ standard is the one torch asks for
    ext = [
        CppExtension(
            "vitplast_kernels._C",
            _rel(glob.glob(os.path.join(HERE, "csrc", "*.cpp"))
                 + glob.glob(os.path.join(HERE, "csrc", "cpu", "*.cpp"))),
            extra_compile_args={"cxx": cxx_flags},
            extra_link_args=["-fopenmp", *SHARED_CXX_RUNTIME],
        )
    ]
    if _want_cuda():
        ext.append(
            CUDAExtension(
                "vitplast_kernels._C_cuda",
                _rel(glob.glob(os.path.join(HERE, "csrc", "cuda", "*.cu"))
                     + glob.glob(os.path.join(HERE, "csrc", "cuda", "*.cpp"))),
                extra_compile_args={
                    "cxx": ["-O3"],
                    "nvcc": ["-O3", *NVCC_MATH, "-lineinfo", *CUDA_ARCHS],
                },
                extra_link_args=SHARED_CXX_RUNTIME,
            )
        )
    return ext


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
