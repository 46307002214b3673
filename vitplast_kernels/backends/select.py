"""Choosing the backend of a call: ``backend="auto"`` or a name, checked against the tensors' device.

``"auto"`` resolves by device: CUDA -> the GPU choice of `vitplast_kernels.backends.cuda` (a fixed
plan unless autotuning is asked for), CPU -> the C++ extension, anything else -> the PyTorch path;
float64 inputs -> the PyTorch path on every device (the kernels take float32, float16 and bfloat16).
For the all-pairs op (``op="all_pairs"``) only backends with an all-pairs kernel count; ``"auto"`` on
CUDA is Triton there. A backend asked for by name is used or an error is raised: never replaced.
"""

from __future__ import annotations

import warnings

import torch

# importing a backend module registers it
from . import cpu, cuda, eager  # noqa: F401
from .extension import cpu_extension_available, extension_error
from .registry import AUTO, BACKENDS, Backend
from .triton import ops as _triton_ops  # noqa: F401

_warned_cpu_missing = False


def backend_names(op: str = "paired") -> tuple[str, ...]:
    """The names ``backend=`` accepts for ``op`` (``"paired"`` or ``"all_pairs"``)."""
    names = [n for n, b in BACKENDS.items() if op == "paired" or b.all_pairs is not None]
    return ("auto", *names)


def _warn_cpu_missing() -> None:
    global _warned_cpu_missing
    if not _warned_cpu_missing:
        _warned_cpu_missing = True
        warnings.warn(
            "vitplast_kernels._C (the C++ CPU kernels) could not be imported "
            f"({extension_error('_C')}); backend='auto' uses the PyTorch path on CPU tensors, "
            "which is slower. Rebuild with `pip install -e . --no-build-isolation`.",
            RuntimeWarning,
            stacklevel=4,
        )


def _auto(device: torch.device, op: str, dtype: torch.dtype | None) -> str:
    if dtype == torch.float64:
        return "torch"  # the kernels take 16/32-bit inputs; the PyTorch path is exact in float64
    if device.type == "cuda":
        return "triton" if op == "all_pairs" else AUTO["cuda"]()
    if device.type == "cpu":
        if cpu_extension_available():
            return "cpu"
        _warn_cpu_missing()
    return "torch"


def resolve(name: str, device: torch.device, *, op: str = "paired",
            dtype: torch.dtype | None = None) -> Backend:
    """The backend called ``name`` for ``op`` on tensors of ``device`` and ``dtype`` ("auto" picks one)."""
    if name == "auto":
        name = _auto(device, op, dtype)
    backend = BACKENDS.get(name)
    if backend is None or (op == "all_pairs" and backend.all_pairs is None):
        raise ValueError(f"backend must be one of {backend_names(op)}, got {name!r}")
    if backend.device_types is not None and device.type not in backend.device_types:
        raise ValueError(
            f"backend={name!r} runs on {'/'.join(backend.device_types)} tensors, got tensors on {device}"
        )
    if dtype is not None and dtype not in backend.dtypes:
        takes = ", ".join(str(d).removeprefix("torch.") for d in backend.dtypes)
        raise TypeError(f"backend={name!r} takes {takes} inputs, got {dtype}: use backend='auto' or 'torch' "
                        "(the PyTorch path, exact in float64)")
    backend.require()
    return backend
