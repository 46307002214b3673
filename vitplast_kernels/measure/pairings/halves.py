"""``pairs="halves"``: a batch of ``N = 2B`` sequences, sequence ``i`` paired with ``i + B``; matched pairs
(``X[i]`` with ``Y[i]``, the paper's) are the halves of ``torch.cat([X, Y])``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...ops.paired import grouped_sq_sums, halves_sq_sums
from .base import Pairing, register_pairing


class Halves(Pairing):
    """``N = 2B`` sequences: pair ``i`` is ``(T[i], T[i + B])``. Matched pairs: ``torch.cat([X, Y])``."""

    name = "halves"

    def fits(self, n: int) -> bool:
        return n >= 2 and n % 2 == 0

    def problem(self, n: int, where: str) -> str | None:
        if self.fits(n):
            return None
        return (f"pairs='halves' needs an even batch of at least 2 sequences (2B: sequence i is paired "
                f"with i + B), got {n} sequences in {where}. For matched pairs pass torch.cat([X, Y]) "
                "with X and Y of the same size.")

    def n_pairs(self, n: int) -> int:
        return n // 2

    def sq_sums(self, tensors: Sequence[torch.Tensor], *, backend: str = "auto") -> torch.Tensor:
        dtype = tensors[0].dtype
        if all(t.dtype == dtype for t in tensors):  # the usual case: the grouped op's (G, P) as it is
            return halves_sq_sums(tensors, backend=backend)
        b = tensors[0].shape[0] // 2
        # mixed dtypes: one grouped launch per dtype (the op takes one); results back in input order
        out: list[torch.Tensor | None] = [None] * len(tensors)
        by_dtype: dict[torch.dtype, list[int]] = {}
        for g, t in enumerate(tensors):
            by_dtype.setdefault(t.dtype, []).append(g)
        for idx in by_dtype.values():
            sums = grouped_sq_sums(
                [tensors[g][:b] for g in idx], [tensors[g][b:] for g in idx], backend=backend
            )
            for k, g in enumerate(idx):
                out[g] = sums[k]
        return torch.stack(out)  # type: ignore[arg-type]


register_pairing("halves", Halves)
