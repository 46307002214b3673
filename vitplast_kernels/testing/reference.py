"""The float64 truth every kernel is tested against (used by tests and bench, never by the ops).

Inputs are up-cast to float64 before the difference: exact enough to be the truth for
float32/float16/bfloat16 inputs.
"""

from __future__ import annotations

import torch


def pair_sq_distances_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B, ...) x (B, ...) -> (B,) float64: sum over non-batch elements of (a - b)^2 in float64."""
    d = a.detach().to(torch.float64) - b.detach().to(torch.float64)
    return d.square().flatten(1).sum(1)


def pair_ratios_reference(
    fx: torch.Tensor, fy: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """(B,) float64 ||fx - fy|| / ||x - y||, NaN where the input distance is 0."""
    num = pair_sq_distances_reference(fx, fy)
    den = pair_sq_distances_reference(x, y)
    return torch.where(den > 0, (num / den).sqrt(), torch.full_like(den, float("nan")))


def all_pair_sq_distances_reference(a: torch.Tensor) -> torch.Tensor:
    """``(N, ...) -> (N, N)`` float64 truth: direct differences of float64 up-casts."""
    x = a.detach().reshape(a.shape[0], -1).to(torch.float64)
    out = torch.zeros(x.shape[0], x.shape[0], dtype=torch.float64, device=x.device)
    for i in range(x.shape[0] - 1):
        d = (x[i + 1 :] - x[i]).square().sum(1)
        out[i, i + 1 :] = d
        out[i + 1 :, i] = d
    return out
