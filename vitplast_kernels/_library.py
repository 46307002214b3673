"""torch.library glue for the ops defined in C++ (``vitplast::``): fake (meta) implementations so that
``torch.compile(fullgraph=True)`` traces through them and ``torch.library.opcheck`` passes."""

from __future__ import annotations

import torch

from ._extension import cpu_extension_available

_registered = False


def register_fakes() -> None:
    """Registers fake implementations once the C++ schemas are loaded (idempotent)."""
    global _registered
    if _registered or not cpu_extension_available():
        return

    @torch.library.register_fake("vitplast::pair_sq_distances")
    def _pair_sq_distances_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        torch._check(a.dim() >= 2, lambda: "a must have at least 2 dims")
        torch._check(a.shape == b.shape, lambda: "a and b must have the same shape")
        return a.new_empty((a.shape[0],), dtype=torch.float32)

    @torch.library.register_fake("vitplast::pair_sq_distances_grouped")
    def _pair_sq_distances_grouped_fake(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
        torch._check(len(a) == len(b) and len(a) > 0, lambda: "a and b must hold as many tensors")
        return a[0].new_empty((len(a), a[0].shape[0]), dtype=torch.float32)

    _registered = True
