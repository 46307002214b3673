"""``backend="torch"``: the paired and all-pairs reductions in plain PyTorch (any device torch runs on).

Up-cast to float64, difference, square, sum with torch's own reduction (float64: every square of a
float32 difference is representable; devices without float64, such as MPS, use float32 and keep
float32's range). All pairs: one direct difference per pair (O(N^2 K) traffic: slow, simple, the
portable fallback). Outputs are the float64 sums, like every backend's; gradients are torch's own. The one
backend for float64 inputs (exact: no up-cast needed; ``"auto"`` picks it for them on every device).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..numerics import KERNEL_DTYPES
from .registry import Backend, register_backend


def _wide(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def pair_sq_distances_torch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B, ...) x (B, ...) -> (B,) float64 sums of squared differences of float64 up-casts."""
    wide = _wide(a.device)
    d = a.to(wide) - b.to(wide)
    return d.square().flatten(1).sum(1)


def grouped_torch(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack([pair_sq_distances_torch(x, y) for x, y in zip(a, b, strict=True)])


def _all_pairs_torch(x: torch.Tensor) -> torch.Tensor:
    """``(N, K) -> (N, N)`` float64, one direct difference per pair (backend ``"torch"``)."""
    n, wide = x.shape[0], _wide(x.device)
    out = torch.zeros(n, n, dtype=wide, device=x.device)
    for i in range(n - 1):
        d = (x[i + 1 :].to(wide) - x[i].to(wide)).square().sum(1)
        out[i, i + 1 :] = d
        out[i + 1 :, i] = d
    return out


register_backend(Backend("torch", None, lambda: True, lambda: None, pair_sq_distances_torch, grouped_torch,
                         all_pairs=_all_pairs_torch, dtypes=(*KERNEL_DTYPES, torch.float64)))
