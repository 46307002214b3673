"""Public paired reductions: validate, pick a backend, call it (the thin op layer).

Shapes: ``a``, ``b`` are ``(B, ...)``: pair ``i`` is ``(a[i], b[i])``; everything after the leading
dim is one pair member (e.g. ``(B, n, d)`` tokens x channels). Inputs may be float32, float16 or
bfloat16, contiguous or strided views; differences are taken after up-casting and sums are accumulated
in float32 or wider. Outputs are float32 on the inputs' device and carry no gradient.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..backends import resolve
from ..backends.extension import cpu_extension_available
from . import validate


def pair_sq_distances(a: torch.Tensor, b: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(B, ...) x (B, ...) -> (B,)`` float32: ``sum_k (a[i, k] - b[i, k])^2`` per pair ``i``."""
    a, b = validate.check_pair("a", a, "b", b)
    return resolve(backend, a.device).pair_sq(a.detach(), b.detach())


def pair_distances(a: torch.Tensor, b: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(B, ...) x (B, ...) -> (B,)`` float32 Frobenius distances ``||a[i] - b[i]||``."""
    return pair_sq_distances(a, b, backend=backend).sqrt()


def pair_ratios(
    fx: torch.Tensor, fy: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, backend: str = "auto"
) -> torch.Tensor:
    """``(B,)`` float32 rates ``||fx[i] - fy[i]|| / ||x[i] - y[i]||``; NaN where ``x[i] == y[i]``.

    ``fx``/``fy`` are the component's outputs for the pair members ``x``/``y``; the outputs and the
    inputs may have different shapes but must hold the same number of pairs ``B``.
    """
    fx, fy = validate.check_pair("fx", fx, "fy", fy)
    x, y = validate.check_pair("x", x, "y", y)
    validate.check_output_input(fx, x)
    num = pair_sq_distances(fx, fy, backend=backend)
    den = pair_sq_distances(x, y, backend=backend)
    return ratio_from_sq(num, den)


def ratio_from_sq(num_sq: torch.Tensor, den_sq: torch.Tensor) -> torch.Tensor:
    """``sqrt(num_sq / den_sq)`` with NaN where ``den_sq == 0`` (identical inputs: no rate)."""
    if num_sq.shape != den_sq.shape:
        raise ValueError(
            f"num_sq and den_sq must have the same shape, got {tuple(num_sq.shape)} and {tuple(den_sq.shape)}"
        )
    nan = torch.full_like(den_sq, float("nan"))
    return torch.where(den_sq > 0, (num_sq / den_sq).sqrt(), nan)


def pair_sq_distances_grouped(
    a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], *, backend: str = "auto"
) -> torch.Tensor:
    """G pairs of ``(B, ...)`` tensors (widths may differ, ``B`` shared) -> ``(G, B)`` float32.

    One launch for the whole group on GPU backends: what a capture uses to reduce every tensor of a
    forward pass at once.
    """
    for name, group in (("a", a), ("b", b)):
        if isinstance(group, torch.Tensor):
            raise TypeError(
                f"{name} must be a sequence of tensors (one per group member), got a single tensor of shape "
                f"{tuple(group.shape)}: use pair_sq_distances for one pair of tensors"
            )
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"a and b must hold as many tensors, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("a and b are empty: the group must hold at least one pair of tensors")
    if not validate.group_is_valid(a, b):  # the per-tensor checks raise, naming the offender
        for g, (x, y) in enumerate(zip(a, b, strict=True)):
            validate.check_pair(f"a[{g}]", x, f"b[{g}]", y)
        names = [f"a[{g}]" for g in range(len(a))]
        validate.check_rows(names, a)
        validate.check_same(names, a, same_shape=False)
    return resolve(backend, a[0].device).grouped(_detached(a), _detached(b))


def _detached(ts: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach() if t.requires_grad else t for t in ts]


# The C++ ops (``vitplast::pair_sq_distances[_grouped]``, schemas in csrc/ops_registration.cpp) get their
# fake implementations here, beside the wrappers that call them, once the extension has loaded.
if cpu_extension_available():

    @torch.library.register_fake("vitplast::pair_sq_distances")
    def _pair_sq_distances_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        torch._check(a.dim() >= 2, lambda: "a must have at least 2 dims")
        torch._check(a.shape == b.shape, lambda: "a and b must have the same shape")
        return a.new_empty((a.shape[0],), dtype=torch.float32)

    @torch.library.register_fake("vitplast::pair_sq_distances_grouped")
    def _pair_sq_distances_grouped_fake(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
        torch._check(len(a) == len(b) and len(a) > 0, lambda: "a and b must hold as many tensors")
        return a[0].new_empty((len(a), a[0].shape[0]), dtype=torch.float32)
