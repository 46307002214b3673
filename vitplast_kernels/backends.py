"""Backend registry and selection for the paired reductions.

A backend computes ``pair_sq(a, b) -> (B,) float32`` and ``grouped(as_, bs) -> (G, B) float32``.
``"auto"`` resolves by device: CUDA -> the fastest GPU backend measured on this GPU (see
``gpu_autotune``), CPU -> the C++ extension, anything else -> the PyTorch reference path.
GPU backends (``triton``, ``cuda``) register themselves from their own modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from . import reference
from ._extension import cpu_extension_available, require_cpu_extension
from ._library import register_fakes

PairSqFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
GroupedFn = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class Backend:
    name: str
    device_types: tuple[str, ...] | None  # None: any device
    available: Callable[[], bool]
    require: Callable[[], None]  # raises an actionable error when unavailable
    pair_sq: PairSqFn
    grouped: GroupedFn


_BACKENDS: dict[str, Backend] = {}
# device type -> callable choosing a backend name for "auto" (GPU modules install theirs)
_AUTO: dict[str, Callable[[], str]] = {}


def register_backend(backend: Backend) -> None:
    _BACKENDS[backend.name] = backend


def register_auto(device_type: str, chooser: Callable[[], str]) -> None:
    _AUTO[device_type] = chooser


def backend_names() -> tuple[str, ...]:
    _load_optional_backends()
    return ("auto", *_BACKENDS)


def _grouped_loop(pair_sq: PairSqFn) -> GroupedFn:
    def grouped(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.stack([pair_sq(x, y) for x, y in zip(a, b, strict=True)])

    return grouped


# The compiled ops: the dispatcher routes by device to the CPU (_C) or CUDA (_C_cuda) implementation.
def dispatcher_pair_sq(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.ops.vitplast.pair_sq_distances(a, b)


def dispatcher_grouped(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.ops.vitplast.pair_sq_distances_grouped(list(a), list(b))


def _always() -> bool:
    return True


def _nothing() -> None:
    return None


register_backend(
    Backend(
        "torch", None, _always, _nothing, reference.pair_sq_distances_torch,
        _grouped_loop(reference.pair_sq_distances_torch),
    )
)
register_backend(Backend("cpu", ("cpu",), cpu_extension_available, require_cpu_extension,
                         dispatcher_pair_sq, dispatcher_grouped))

_optional_loaded = False


@torch.compiler.assume_constant_result  # run eagerly (imports) when torch.compile traces a first call
def _load_optional_backends() -> None:
    """Imports the GPU backend modules (they register themselves); cheap after the first call."""
    global _optional_loaded
    if _optional_loaded:
        return
    _optional_loaded = True
    register_fakes()
    import importlib

    for module in ("triton_backend", "cuda_backend"):
        try:
            importlib.import_module(f"vitplast_kernels.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"vitplast_kernels.{module}":
                raise


def resolve(name: str, device: torch.device) -> Backend:
    """The backend called ``name`` for tensors on ``device`` ("auto" picks one)."""
    _load_optional_backends()
    if name == "auto":
        chooser = _AUTO.get(device.type)
        if chooser is not None:
            name = chooser()
        elif device.type == "cpu" and cpu_extension_available():
            name = "cpu"
        else:
            name = "torch"
    backend = _BACKENDS.get(name)
    if backend is None:
        raise ValueError(f"backend must be one of {backend_names()}, got {name!r}")
    if backend.device_types is not None and device.type not in backend.device_types:
        raise ValueError(
            f"backend={name!r} runs on {'/'.join(backend.device_types)} tensors, got tensors on {device}"
        )
    backend.require()
    return backend
