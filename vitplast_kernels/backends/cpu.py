"""``backend="cpu"``: the C++ CPU kernels (``vitplast_kernels._C``, OpenMP) for the paired ops, and the
split-K Gram for all pairs (design and error model: `vitplast_kernels.ops.all_pairs`). Both
return float64 sums.

The all-pairs Gram comes from ``_C``'s AVX-512 tile kernel (``vitplast::gram_lower_f32``,
csrc/cpu/gram_tiles_avx512.cpp: 4x4 tiles of the lower triangle only, float32 block sums of 512
columns added in float64, the anchor subtracted on the fly) where the CPU has AVX-512 F/DQ and the
batch has at most `TILE_GRAM_MAX_ROWS` rows; otherwise from batched BLAS products of the lower block
triangle. On the 2-core Zen 4 VM of bench/measured/cpu-2026-12-03-kernels-2 the kernel is 1.7x the
BLAS path on one thread (80-86% of the ``torch.mm`` rate on the triangle's FLOPs against 47-52%).
The trust threshold keeps the BLAS path's chunk count (``K // chunk``): the kernel's measured error
constant is 0.04-0.07 in its own model (L = 512) and under 0.04 in that coarser one, so both paths
recompute the same pairs.

Range of the all-pairs Gram: products of float32 rows overflow float32 above about 2^64 and lose
precision below 2^-63. When the Gram's diagonal shows it (a norm not finite, or under
`underflow_floor`), rows whose largest magnitude lies outside
``[2^-30, 2^40]`` are scaled by the power of two (exact) that brings it into ``[0.5, 1)``, the Gram is
redone and unscaled in float64: one extra Gram for such batches, nothing for the others. Pairs whose
float32 Gram is still out of range are recomputed directly, like the cancelling ones.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from ..numerics import C_CPU, gram_error, reliability_threshold, underflow_floor
from .extension import cpu_extension_available, require_cpu_extension
from .registry import Backend, register_backend

CPU_CHUNK = 4096  # target chunk length L of the CPU split-K


# The compiled ops: the dispatcher routes by device to the CPU (_C) or CUDA (_C_cuda) implementation.
def dispatcher_pair_sq(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.ops.vitplast.pair_sq_distances(a, b)


def dispatcher_grouped(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.ops.vitplast.pair_sq_distances_grouped(list(a), list(b))


# ---------------------------------------------------------------------------------------------
# CPU: BLAS Gram, split-K with float64 combination, recompute of unreliable pairs
# ---------------------------------------------------------------------------------------------


GROUP_BYTES = 8 << 20  # centred chunks per batched product: a slab that stays in cache


# Rows up to which the tile kernel beats BLAS on one core (bench/measured/cpu-2026-12-03-kernels-2:
# 1.9x at N = 32, 1.7x at 128, 1.3x at 512, 0.9x at 1024 and 2048, where a 512-column block of all
# the rows no longer fits in L2).
TILE_GRAM_MAX_ROWS = 512


def _use_tile_gram(x: torch.Tensor) -> bool:
    return x.dtype == torch.float32 and x.shape[0] <= TILE_GRAM_MAX_ROWS and tile_gram_usable()


@functools.cache
def tile_gram_usable() -> bool:
    """Whether ``_C`` has the AVX-512 tile Gram (``vitplast::gram_lower_f32``) and this CPU runs it."""
    if not cpu_extension_available() or not hasattr(torch.ops.vitplast, "gram_lower_supported"):
        return False
    return bool(torch.ops.vitplast.gram_lower_supported())


def _split_gram(x: torch.Tensor, chunk: int, anchor: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """``(N, K)`` float32 with unit inner stride -> ``((N, N)`` float64 Gram, number of chunks).

    Up to `TILE_GRAM_MAX_ROWS` rows, with `tile_gram_usable`: the tile kernel (module docstring).
    Otherwise each chunk's float32 Gram (batched matrix products over chunks of about ``chunk``
    columns) is summed in float64. Only the lower block triangle is multiplied (rows ``[0, h)``
    against themselves, rows ``[h, N)`` against all: 3/4 of the full product's work), then mirrored.
    ``anchor`` ``(K,)``: the Gram of ``x - anchor``, centred a cache-sized slab of chunks at a time
    (no centred copy of ``x`` is written to memory)."""
    n, k = x.shape
    splits = max(1, k // chunk)
    if _use_tile_gram(x):
        return torch.ops.vitplast.gram_lower_f32(x, anchor), splits
    length = k // splits
    h = n // 2
    tail = k - splits * length  # columns after the last full chunk (fewer than one chunk)
    parts = splits + (1 if tail else 0)
    # every chunk's float32 products, summed in float64 once at the end (few parallel regions: on a
    # loaded machine each can wait for a descheduled thread)
    top = torch.empty(parts, h, h, dtype=x.dtype, device=x.device)
    rest = torch.empty(parts, n - h, n, dtype=x.dtype, device=x.device)

    def multiply(chunks: torch.Tensor, at: int) -> None:  # (S, N, L) chunks into slots [at, at + S)
        end = at + chunks.shape[0]
        if h:
            torch.bmm(chunks[:, :h], chunks[:, :h].transpose(1, 2), out=top[at:end])
        torch.bmm(chunks[:, h:], chunks.transpose(1, 2), out=rest[at:end])

    per = splits  # chunks per batched product
    if anchor is not None:
        per = max(1, min(splits, GROUP_BYTES // max(1, n * length * x.element_size())))
    for s0 in range(0, splits, per):
        s1 = min(splits, s0 + per)
        slab = x[:, s0 * length : s1 * length]
        if anchor is not None:
            slab = slab - anchor[s0 * length : s1 * length]
        multiply(slab.unflatten(1, (s1 - s0, length)).transpose(0, 1), s0)
    if tail:
        last = x[:, splits * length :]
        if anchor is not None:
            last = last - anchor[splits * length :]
        multiply(last[None], splits)
    gram = torch.empty(n, n, dtype=torch.float64, device=x.device)
    gram[h:] = rest.sum(0, dtype=torch.float64)
    if h:
        gram[:h, :h] = top.sum(0, dtype=torch.float64)
    gram[:h, h:] = gram[h:, :h].T
    return gram, splits


SAFE_MAX_ABS = (2.0**-30, 2.0**40)  # rows whose max |x| lies outside are scaled before the Gram


def _row_scaled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(x', u)``: ``x`` with each row whose max magnitude is outside `SAFE_MAX_ABS` multiplied by
    the power of two ``2^-e`` that brings it into ``[0.5, 1)`` (exact), and ``u = 2^e`` per row in
    float64; ``(x, None)`` when no row needs it."""
    m = torch.maximum(x.amax(1), -x.amin(1))  # two vectorised reductions: faster than the inf-norm
    lo, hi = SAFE_MAX_ABS
    need = torch.isfinite(m) & (m > 0) & ((m < lo) | (m > hi))
    if not bool(need.any()):
        return x, None
    e = torch.where(need, torch.frexp(m).exponent, 0)
    # 2^-e in two float32 factors (|e| reaches 149 for subnormal maxima, past float32's 2^127)
    half = torch.div(e, 2, rounding_mode="floor")
    f1 = torch.pow(2.0, (-half).to(torch.float32))
    f2 = torch.pow(2.0, (half - e).to(torch.float32))
    xs = x * f1[:, None]
    xs *= f2[:, None]
    return xs, torch.pow(2.0, e.to(torch.float64))


def _gram_sq(x: torch.Tensor, chunk: int, anchor: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Gram-derived ``(N, N)`` float64 squared distances, the ``(N, N)`` bool unreliable mask (strict
    lower triangle) and the threshold used; ``anchor``: of the rows of ``x - anchor``."""
    floor = underflow_floor(x.shape[1])
    gram, splits = _split_gram(x, chunk, anchor)
    ns = gram.diagonal()
    unscale = None
    if bool((~torch.isfinite(ns) | ((ns > 0) & (ns < floor))).any()):
        if anchor is not None:  # the rare out-of-range batch: scale the centred rows themselves
            x, anchor = x - anchor, None
        xs, unscale = _row_scaled(x)
        if unscale is not None:
            gram, splits = _split_gram(xs, chunk)
            ns = gram.diagonal()
    in_range = ns[:, None] + ns[None, :] >= floor  # of the float32 Gram
    if unscale is not None:
        gram = gram * unscale[:, None] * unscale[None, :]
    norms = gram.diagonal()
    scale = norms[:, None] + norms[None, :]
    sq = (scale - 2 * gram).clamp_min(0)
    tau = reliability_threshold(gram_error(x.shape[1], splits, C_CPU))
    lower = torch.ones_like(sq, dtype=torch.bool).tril(-1)
    trusted = (sq >= tau * scale) & in_range & torch.isfinite(scale)
    return sq, ~trusted & lower, tau


def _recompute_pairs(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Direct ``(P,)`` float64 squared distances of the pairs ``(rows[p], cols[p])`` of ``x (N, K)``,
    gathered in groups of at most ~64 MB."""
    per = max(1, (64 << 20) // max(1, 2 * x.shape[1] * x.element_size()))
    parts = [
        dispatcher_pair_sq(x[rows[s : s + per]], x[cols[s : s + per]])
        for s in range(0, rows.numel(), per)
    ]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.float64, device=x.device)


# 4 slices of 512 columns: each slice is a cold read of N short runs, about 0.2 ms at N = 128 on the
# Zen 4 VM of bench/measured/cpu-2026-12-03-kernels-2, and 4 decide as 8 do on the bench's and the
# tests' cases
PROBE_SLICES, PROBE_WIDTH = 4, 512


def _probe_wants_centring(x: torch.Tensor, chunk: int) -> bool:
    """Whether more than N/2 pairs would be unreliable, judged on ``PROBE_SLICES`` column slices of
    ``PROBE_WIDTH`` spread over K (about ``2048 / K`` of the Gram's cost): then the rows are centred
    before the Gram instead of after a wasted one."""
    n, k = x.shape
    if k < 4 * PROBE_SLICES * PROBE_WIDTH:
        return False  # short rows: a second Gram is cheap, the fallback handles it
    gram = torch.zeros(n, n, dtype=torch.float64)
    tiles = _use_tile_gram(x)  # each slice's call runs on one thread up to N = 128 (no parallel region)
    for start in torch.linspace(0, k - PROBE_WIDTH, PROBE_SLICES).long().tolist():
        part = x[:, start : start + PROBE_WIDTH]
        gram += torch.ops.vitplast.gram_lower_f32(part, None) if tiles else (part @ part.T).to(torch.float64)
    norms = gram.diagonal()
    scale = norms[:, None] + norms[None, :]
    tau = reliability_threshold(gram_error(k, max(1, k // chunk), C_CPU))
    low = ((scale - 2 * gram) < 2 * tau * scale).tril(-1)
    return int(low.sum()) > n // 2


def _all_pairs_cpu(a: torch.Tensor, chunk: int = CPU_CHUNK) -> torch.Tensor:
    """``(N, K)`` -> ``(N, N)`` float64 via the split-K BLAS Gram (see `vitplast_kernels.ops.all_pairs`).
    Runs on torch's intra-op threads as the caller configured them (no process-wide setting changes)."""
    n = a.shape[0]
    x = a.to(torch.float32)
    if x.stride(1) != 1:
        x = x.contiguous()
    # centring on an anchor row (row 0: the mean row would add a read), chunk by chunk in cache
    centred = _probe_wants_centring(x, chunk)
    # (x[0] itself, not a copy: a copy of a long row is one more parallel region)
    sq, unreliable, _ = _gram_sq(x, chunk, x[0] if centred else None)
    if not centred and int(unreliable.sum()) > n // 2:  # the probe missed it
        sq, unreliable, _ = _gram_sq(x, chunk, x[0])
    out = sq
    rows, cols = unreliable.nonzero(as_tuple=True)
    if rows.numel():
        out[rows, cols] = _recompute_pairs(a, rows, cols)
    out = out.tril(-1)
    return out + out.T


register_backend(Backend("cpu", ("cpu",), cpu_extension_available, require_cpu_extension,
                         dispatcher_pair_sq, dispatcher_grouped, all_pairs=_all_pairs_cpu))
