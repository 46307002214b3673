"""Loading of the compiled extensions, with actionable errors.

``_C`` (C++ CPU kernels) registers the ``vitplast::`` op schemas and their CPU implementations;
``_C_cuda`` adds CUDA implementations of the same ops. Both are optional at import time: ``backend="auto"``
warns once and uses the PyTorch path when ``_C`` is missing; a backend asked for by name raises with the
import error and how to build it.
"""

from __future__ import annotations

import importlib

_BUILD_HINT = (
    "Build it with `pip install -e . --no-build-isolation` from the repository root (or `make test`), "
    "with torch already installed; backend='torch' works without it."
)

_loaded: dict[str, bool] = {}
_errors: dict[str, str] = {}


def _try_import(name: str) -> bool:
    if name not in _loaded:
        try:
            importlib.import_module(f"vitplast_kernels.{name}")
            _loaded[name] = True
        except ImportError as exc:  # missing or ABI-incompatible build
            _loaded[name] = False
            _errors[name] = str(exc)
    return _loaded[name]


def extension_error(name: str) -> str | None:
    """The import error of ``_C`` / ``_C_cuda``, or None when it loaded (or was not tried yet)."""
    return _errors.get(name)


def cpu_extension_available() -> bool:
    """True when the C++ CPU extension ``vitplast_kernels._C`` is importable."""
    return _try_import("_C")


def cuda_extension_available() -> bool:
    """True when the CUDA extension ``vitplast_kernels._C_cuda`` is importable (it needs ``_C``)."""
    return cpu_extension_available() and _try_import("_C_cuda")


def require_cpu_extension() -> None:
    if not cpu_extension_available():
        raise RuntimeError(
            f"vitplast_kernels._C (the C++ CPU kernels) could not be imported: {_errors.get('_C')}. "
            + _BUILD_HINT
        )


def require_cuda_extension() -> None:
    require_cpu_extension()
    if not cuda_extension_available():
        raise RuntimeError(
            "vitplast_kernels._C_cuda (the CUDA kernels) could not be imported: "
            f"{_errors.get('_C_cuda')}. It is built when nvcc and a CUDA build of torch are present "
            "(VITPLAST_BUILD_CUDA=1 forces it). " + _BUILD_HINT
        )
