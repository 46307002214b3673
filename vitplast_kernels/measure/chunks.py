"""``ChunkedResult``: a ``PlasticityResult`` made of separately measured chunks, each chunk's sums kept.

The chunks are the resampling units of a bootstrap over pairs: `ChunkedResult.replicate_means`
gives the per-layer and per-component means of resampled sums, computed as ``PlasticityResult.mean``
and ``PlasticityResult.overall`` compute them from the sums of all pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from .result import PlasticityResult


class ChunkedResult(PlasticityResult):
    """The sum of ``chunks`` ``(K, C, L, F)`` float64 (added in chunk order: the sums one accumulation
    of every chunk's pairs makes) as a ``PlasticityResult``, with each chunk's sums (`chunk_stats`)."""

    def __init__(self, chunks: torch.Tensor, components: Sequence[str], layers: Sequence[str], *,
                 meta: Mapping | None = None) -> None:
        if chunks.dim() != 4 or chunks.shape[0] < 1:
            raise ValueError(f"chunks must have shape (K, C, L, F) with K >= 1, got {tuple(chunks.shape)}")
        total = chunks[0].clone()
        for k in range(1, chunks.shape[0]):
            total += chunks[k]
        super().__init__(total, components, layers, meta=meta)
        self._chunks = chunks.detach()

    @classmethod
    def from_results(cls, chunks: Sequence[PlasticityResult]) -> ChunkedResult:
        """One result from separately measured results of the same components, layers and fields."""
        if not chunks:
            raise ValueError("from_results: no chunk")
        first = chunks[0]
        layout = (first.components, first.layers, tuple(first.stats.shape))
        for c in chunks[1:]:
            if (c.components, c.layers, tuple(c.stats.shape)) != layout:
                raise ValueError(f"from_results: chunks differ in components, layers or fields "
                                 f"({c.components} x {len(c.layers)} vs {first.components} x "
                                 f"{len(first.layers)})")
        stacked = torch.stack([c.stats.to(first.stats.device) for c in chunks])
        return cls(stacked, first.components, first.layers, meta=first.meta)

    @property
    def chunk_stats(self) -> torch.Tensor:
        """``(K, C, L, F)`` float64 sums of each chunk."""
        return self._chunks

    def replicate_means(self, counts) -> tuple[torch.Tensor, torch.Tensor]:
        """Bootstrap replicates over chunks: ``counts`` ``(B, K)`` multiplicities of the chunks (each row
        a resample) -> ``(per-layer mean (B, C, L), mean over layers (B, C))`` float64 on the CPU, NaN
        where undefined."""
        chunks = self._chunks.to("cpu", torch.float64)
        counts = torch.as_tensor(counts, dtype=torch.float64)
        if counts.dim() != 2 or counts.shape[1] != chunks.shape[0]:
            raise ValueError(f"counts must have shape (B, K) with K = {chunks.shape[0]} chunks, got "
                             f"{tuple(counts.shape)}")
        sums = torch.tensordot(counts, chunks, dims=([1], [0]))  # (B, C, L, F)
        per_layer = self._mean_std(sums)[0]
        finite = torch.isfinite(per_layer)
        n = finite.sum(-1)
        total = torch.where(finite, per_layer, torch.zeros_like(per_layer)).sum(-1)
        overall = torch.where(n > 0, total / n.clamp_min(1), torch.full_like(total, float("nan")))
        return per_layer, overall
