"""The float64 truth every kernel is tested against (used by tests and bench, never by the ops).

Inputs are up-cast to float64 before the difference: exact enough to be the truth for
float32/float16/bfloat16 inputs. The references are differentiable (plain torch operations): the tests
take the true gradients from them with autograd.
"""

from __future__ import annotations

import torch


def pair_sq_distances_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B, ...) x (B, ...) -> (B,) float64: sum over non-batch elements of (a - b)^2 in float64."""
    d = a.to(torch.float64) - b.to(torch.float64)
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
    x = a.reshape(a.shape[0], -1).to(torch.float64)
    return torch.stack([(x - x[i]).square().sum(1) for i in range(x.shape[0])])
