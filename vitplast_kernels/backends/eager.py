"""``backend="torch"``: the paired and all-pairs reductions in plain PyTorch (any device torch runs on).

Up-cast to float32, difference, square, sum with torch's own reduction; all pairs one direct difference
per pair (O(N^2 K) traffic: slow, simple, the portable fallback).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .registry import Backend, register_backend


def pair_sq_distances_torch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B, ...) x (B, ...) -> (B,) float32, computed with float32 up-casts in plain PyTorch."""
    d = a.to(torch.float32) - b.to(torch.float32)
    return d.square().flatten(1).sum(1)


def grouped_torch(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack([pair_sq_distances_torch(x, y) for x, y in zip(a, b, strict=True)])


def _all_pairs_torch(x: torch.Tensor) -> torch.Tensor:
    """``(N, K) -> (N, N)`` float32, one direct difference per pair (backend ``"torch"``)."""
    n = x.shape[0]
    out = torch.zeros(n, n, dtype=torch.float32, device=x.device)
    for i in range(n - 1):
        d = (x[i + 1 :].to(torch.float32) - x[i].to(torch.float32)).square().sum(1)
        out[i, i + 1 :] = d
        out[i + 1 :, i] = d
    return out


register_backend(Backend("torch", None, lambda: True, lambda: None, pair_sq_distances_torch, grouped_torch,
                         all_pairs=_all_pairs_torch))
