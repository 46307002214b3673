"""Plasticity before finetuning, for `vitplast claim`: matched X-Y pairs measured chunk by chunk.

X is the pretraining-side dataset, Y the downstream one; pair ``i`` is ``(X[a_i], Y[b_i])`` with
``a``, ``b`` random orders drawn from ``seed``. The pairs are measured in chunks of ``pair_batch``
pairs, one forward of ``cat([X chunk, Y chunk])`` each under ``vitplast_kernels.capture(pairs="halves")``,
and each chunk's sums ``[count, sum, sumsq, identical, nonfinite]`` per (component, layer) are kept
apart (``ChunkedResult.chunk_stats``). Chunks are the resampling unit of the bootstrap over pairs (a
chunk of one pair resamples single pairs, ``ChunkedResult.replicate_means``); the sums of all chunks
are exactly the measurement of all pairs at once.

The measured model is the one the finetuning runs start from (``vitplast.models.builder``, with
the same weights).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..criteria import ScoringRequest, score_criteria
from .samples import CHUNK_FIELDS

__all__ = ["measure_chunks", "plan_chunks"]


def _images(dataset, idx: np.ndarray):
    import torch

    images = getattr(dataset, "images", None)
    if isinstance(images, torch.Tensor):
        return images[torch.as_tensor(idx, dtype=torch.long)]
    return torch.stack([dataset[int(i)][0] for i in idx])


def plan_chunks(n_x: int, n_y: int, pairs: int, pair_batch: int) -> int:
    """Chunks that fit: ``pairs // pair_batch``, fewer when the smaller dataset holds fewer images."""
    if pair_batch < 1 or pairs < pair_batch:
        raise ValueError(f"--pairs ({pairs}) must be at least --pair-batch ({pair_batch}) >= 1")
    fit = min(n_x, n_y) // pair_batch
    if fit < 1:
        raise ValueError(f"--pair-batch {pair_batch}: the data holds too few images for one chunk "
                         f"({n_x} X / {n_y} Y images)")
    return min(pairs // pair_batch, fit)


def _pair_batches(x_set, y_set, order_x: np.ndarray, order_y: np.ndarray, chunks: int, pair_batch: int,
                  device):
    """Each chunk's forward input: ``cat([X chunk, Y chunk])`` (halves pairing)."""
    import torch

    for k in range(chunks):
        sl = slice(k * pair_batch, (k + 1) * pair_batch)
        yield torch.cat([_images(x_set, order_x[sl]), _images(y_set, order_y[sl])]).to(device)


def measure_chunks(net, x_set, y_set, *, protocol: str, pairs: int, pair_batch: int, seed: int,
                   device, amp=None, progress: bool = False) -> dict:
    """Measure ``pairs`` matched pairs in chunks, plasticity scored through the scoring service
    (`vitplast.criteria.score_criteria`, one chunk per forward of the one measuring loop); returns
    ``{"components", "layers", "stats" (chunks, C, L, 5) float64 list, "pairs", "chunks", "seconds"}``."""
    import torch

    chunks = plan_chunks(len(x_set), len(y_set), pairs, pair_batch)
    if chunks * pair_batch < pairs:
        warnings.warn(f"--pairs {pairs}: the data holds {chunks * pair_batch} matched pairs in chunks of "
                      f"{pair_batch}; measuring those", stacklevel=2)
    rng = np.random.default_rng(seed)
    order_x = rng.permutation(len(x_set))[: chunks * pair_batch]
    order_y = rng.permutation(len(y_set))[: chunks * pair_batch]
    net = net.to(device).eval()
    request = ScoringRequest(
        lambda s: net, device=device, amp=amp, progress=progress,
        pair_batches=lambda: _pair_batches(x_set, y_set, order_x, order_y, chunks, pair_batch, device),
        options={"protocol": protocol, "pairs": "halves", "chunks": True, "desc": f"plasticity ({protocol})"})
    result = score_criteria(("plasticity",), request)["plasticity"]
    res = result.measurement
    if tuple(res.stat_fields[: len(CHUNK_FIELDS)]) != CHUNK_FIELDS:
        raise RuntimeError(f"the result's statistics {res.stat_fields} do not start with {CHUNK_FIELDS}")
    stats = res.chunk_stats[..., : len(CHUNK_FIELDS)].detach().to("cpu", torch.float64)
    return {"components": list(res.components), "layers": list(res.layers), "stats": stats.numpy().tolist(),
            "pairs": chunks * pair_batch, "chunks": chunks, "seconds": result.cost.seconds}
