"""The one backend registry, for the paired and the all-pairs reductions.

A backend computes ``pair_sq(a, b) -> (B,) float64``, ``grouped(as_, bs) -> (G, B) float64`` and, when it
has one, ``all_pairs(x (N, K)) -> (N, N) float64``; ``dtypes`` are the input dtypes it takes (float64 only on
the PyTorch path). Backend modules register themselves here; choosing
one for a call (``"auto"`` included) is `vitplast_kernels.backends.select`'s job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..numerics import KERNEL_DTYPES

PairSqFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
GroupedFn = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor]], torch.Tensor]
AllPairsFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Backend:
    name: str
    device_types: tuple[str, ...] | None  # None: any device
    available: Callable[[], bool]
    require: Callable[[], None]  # raises an actionable error when unavailable
    pair_sq: PairSqFn
    grouped: GroupedFn
    all_pairs: AllPairsFn | None = None  # None: no all-pairs kernel
    dtypes: tuple[torch.dtype, ...] = KERNEL_DTYPES  # input dtypes its kernels take


BACKENDS: dict[str, Backend] = {}
# device type -> callable choosing a backend name for "auto" (GPU modules install theirs)
AUTO: dict[str, Callable[[], str]] = {}


def register_backend(backend: Backend) -> None:
    BACKENDS[backend.name] = backend


def register_auto(device_type: str, chooser: Callable[[], str]) -> None:
    AUTO[device_type] = chooser


def usable(name: str) -> bool:
    backend = BACKENDS.get(name)
    return backend is not None and backend.available()
