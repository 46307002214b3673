"""Plasticity before finetuning, for `vitplast claim`: matched X-Y pairs measured chunk by chunk.

X is the pretraining-side dataset, Y the downstream one; pair ``i`` is ``(X[a_i], Y[b_i])`` with
``a``, ``b`` random orders drawn from ``seed``. The pairs are measured in chunks of ``pair_batch``
pairs, one forward of ``cat([X chunk, Y chunk])`` each under ``vitplast_kernels.capture(pairs="halves")``,
and each chunk's sums ``[count, sum, sumsq, identical, nonfinite]`` per (component, layer) are kept
apart. Chunks are the resampling unit of the bootstrap over pairs (a chunk of one pair resamples
single pairs); the sums of all chunks are exactly the measurement of all pairs at once.

The measured model is the one the finetuning runs start from (``vitplast.models.builder``, with
the same weights).
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings

import numpy as np

# layout of the saved chunk statistics along their last axis: the result's first stat_fields (checked
# when measured), read by name below
CHUNK_FIELDS = ("count", "sum", "sumsq", "identical", "nonfinite")


def _field(stats: np.ndarray, name: str) -> np.ndarray:
    return stats[..., CHUNK_FIELDS.index(name)]


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


def measure_chunks(net, x_set, y_set, *, protocol: str, pairs: int, pair_batch: int, seed: int,
                   device, amp=None, progress: bool = False) -> dict:
    """Measure ``pairs`` matched pairs in chunks; returns ``{"components", "layers", "stats"
    (chunks, C, L, 5) float64 list, "pairs", "chunks", "seconds"}``."""
    import torch
    from tqdm.auto import tqdm

    import vitplast_kernels as vk

    chunks = plan_chunks(len(x_set), len(y_set), pairs, pair_batch)
    if chunks * pair_batch < pairs:
        warnings.warn(f"--pairs {pairs}: the data holds {chunks * pair_batch} matched pairs in chunks of "
                      f"{pair_batch}; measuring those", stacklevel=2)
    rng = np.random.default_rng(seed)
    order_x = rng.permutation(len(x_set))[: chunks * pair_batch]
    order_y = rng.permutation(len(y_set))[: chunks * pair_batch]
    amp = amp or contextlib.nullcontext
    t0 = time.perf_counter()
    stats, components, layers = [], None, None
    net = net.to(device).eval()
    for k in tqdm(range(chunks), desc=f"plasticity ({protocol})", unit="chunk", disable=not progress,
                  leave=False):
        sl = slice(k * pair_batch, (k + 1) * pair_batch)
        batch = torch.cat([_images(x_set, order_x[sl]), _images(y_set, order_y[sl])]).to(device)
        with vk.capture(net, protocol=protocol, pairs="halves") as acts, torch.no_grad(), amp():
            net(batch)
        res = vk.pairwise_plasticity(acts)
        if tuple(res.stat_fields[: len(CHUNK_FIELDS)]) != CHUNK_FIELDS:
            raise RuntimeError(f"the result's statistics {res.stat_fields} do not start with {CHUNK_FIELDS}")
        if components is None:
            components, layers = list(res.components), list(res.layers)
        stats.append(res.stats[..., : len(CHUNK_FIELDS)].detach().to("cpu", torch.float64).numpy())
    return {"components": components, "layers": layers, "stats": np.stack(stats).tolist(),
            "pairs": chunks * pair_batch, "chunks": chunks, "seconds": time.perf_counter() - t0}


def layer_means(stats: np.ndarray) -> np.ndarray:
    """``(..., C, L, 5)`` summed chunk statistics -> ``(..., C, L)`` mean rate (NaN without pairs):
    ``PlasticityResult.mean``, over any leading axes (the bootstrap's replicates)."""
    count, total = _field(stats, "count"), _field(stats, "sum")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.where(count > 0, count, 1.0), np.nan)


def means_over_layers(per_layer: np.ndarray) -> np.ndarray:
    """``(..., C, L)`` -> ``(..., C)``: mean over the layers that have a value
    (``PlasticityResult.overall``, over any leading axes: the bootstrap's replicates)."""
    finite = np.isfinite(per_layer)
    n = finite.sum(-1)
    total = np.where(finite, per_layer, 0.0).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.where(n > 0, n, 1), np.nan)


def summarize_chunks(measured: dict, counts: np.ndarray, level: float = 0.95) -> dict:
    """Point values and bootstrap intervals from the chunk statistics.

    ``counts``: ``(B, chunks)`` resample multiplicities (shared with the correlation bootstrap, so
    every replicate sees the same pairs for every component). Returns per component ``value``
    (all pairs), ``ci``, ``per_layer``, ``per_layer_ci``, ``pairs``, ``excluded`` and the replicate
    matrix ``replicates`` ``(B, C)``.
    """
    from .statistics import percentile_interval

    stats = np.asarray(measured["stats"], dtype=np.float64)  # (K, C, L, 5)
    total = stats.sum(0)
    per_layer = layer_means(total)  # (C, L)
    value = means_over_layers(per_layer)
    reps_layer = layer_means(np.tensordot(counts, stats, axes=(1, 0)))  # (B, C, L)
    reps = means_over_layers(reps_layer)  # (B, C)
    out = {}
    for i, c in enumerate(measured["components"]):
        out[c] = {
            "value": float(value[i]),
            "ci": list(percentile_interval(reps[:, i], level)),
            "per_layer": [float(v) if math.isfinite(v) else None for v in per_layer[i]],
            "per_layer_ci": [list(percentile_interval(reps_layer[:, i, l], level))
                             for l in range(per_layer.shape[1])],
            "pairs": int(_field(total[i], "count").min()),
            "excluded": int(_field(total[i], "identical").sum() + _field(total[i], "nonfinite").sum()),
        }
    return {"components": out, "replicates": reps}
