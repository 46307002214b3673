"""PyTorch implementations of the paired reductions: the truth (float64) and the portable backend.

``pair_sq_distances_reference`` is what every kernel is tested against: inputs up-cast to float64
before the difference, exact enough to be the truth for float32/float16/bfloat16 inputs.
``pair_sq_distances_torch`` is the ``backend="torch"`` path: up-cast to float32, difference, square,
sum with torch's own (pairwise / tree) reduction. It runs on any device torch supports.
"""

from __future__ import annotations

import torch


def pair_sq_distances_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B, ...) x (B, ...) -> (B,) float64: sum over non-batch elements of (a - b)^2 in float64."""
    d = a.detach().to(torch.float64) - b.detach().to(torch.float64)
    return d.square().flatten(1).sum(1)


def pair_sq_distances_torch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B, ...) x (B, ...) -> (B,) float32, computed with float32 up-casts in plain PyTorch."""
    d = a.to(torch.float32) - b.to(torch.float32)
    return d.square().flatten(1).sum(1)


def pair_ratios_reference(
    fx: torch.Tensor, fy: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """(B,) float64 ||fx - fy|| / ||x - y||, NaN where the input distance is 0."""
    num = pair_sq_distances_reference(fx, fy)
    den = pair_sq_distances_reference(x, y)
    return torch.where(den > 0, (num / den).sqrt(), torch.full_like(den, float("nan")))
