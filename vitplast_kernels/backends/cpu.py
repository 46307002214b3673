"""``backend="cpu"``: the C++ CPU kernels (``vitplast_kernels._C``, OpenMP) for the paired ops, and the
split-K BLAS Gram for all pairs (design and error model: :mod:`vitplast_kernels.ops.all_pairs`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..numerics import C_CPU, gram_error, reliability_threshold
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


def _split_gram(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, int]:
    """``(N, K)`` float32 with unit inner stride -> ``((N, N)`` float64 Gram, number of chunks)."""
    n, k = x.shape
    splits = max(1, k // chunk)
    length = k // splits
    main = x[:, : splits * length].unflatten(1, (splits, length)).transpose(0, 1)  # (S, N, L) view
    gram = torch.bmm(main, main.transpose(1, 2)).sum(0, dtype=torch.float64)
    if splits * length < k:  # tail shorter than one chunk
        tail = x[:, splits * length :]
        gram += (tail @ tail.T).to(torch.float64)
    return gram, splits


def _gram_sq(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Gram-derived ``(N, N)`` float64 squared distances, the ``(N, N)`` bool unreliable mask (strict
    lower triangle) and the threshold used."""
    gram, splits = _split_gram(x, chunk)
    norms = gram.diagonal()
    sq = (norms[:, None] + norms[None, :] - 2 * gram).clamp_min(0)
    tau = reliability_threshold(gram_error(x.shape[1], splits, C_CPU))
    lower = torch.ones_like(sq, dtype=torch.bool).tril(-1)
    unreliable = ~(sq >= tau * (norms[:, None] + norms[None, :])) & lower
    return sq, unreliable, tau


def _recompute_pairs(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Direct ``(P,)`` float32 squared distances of the pairs ``(rows[p], cols[p])`` of ``x (N, K)``,
    gathered in groups of at most ~64 MB."""
    per = max(1, (64 << 20) // max(1, 2 * x.shape[1] * x.element_size()))
    parts = [
        dispatcher_pair_sq(x[rows[s : s + per]], x[cols[s : s + per]])
        for s in range(0, rows.numel(), per)
    ]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.float32, device=x.device)


PROBE_SLICES, PROBE_WIDTH = 8, 512


def _probe_wants_centring(x: torch.Tensor, chunk: int) -> bool:
    """Whether more than N/2 pairs would be unreliable, judged on ``PROBE_SLICES`` column slices of
    ``PROBE_WIDTH`` spread over K (about ``4096 / K`` of the Gram's cost): then the rows are centred
    before the Gram instead of after a wasted one."""
    n, k = x.shape
    if k < 4 * PROBE_SLICES * PROBE_WIDTH:
        return False  # short rows: a second Gram is cheap, the fallback handles it
    gram = torch.zeros(n, n, dtype=torch.float64)
    for start in torch.linspace(0, k - PROBE_WIDTH, PROBE_SLICES).long().tolist():
        part = x[:, start : start + PROBE_WIDTH]
        gram += (part @ part.T).to(torch.float64)
    norms = gram.diagonal()
    scale = norms[:, None] + norms[None, :]
    tau = reliability_threshold(gram_error(k, max(1, k // chunk), C_CPU))
    low = ((scale - 2 * gram) < 2 * tau * scale).tril(-1)
    return int(low.sum()) > n // 2


def _all_pairs_cpu(a: torch.Tensor, chunk: int = CPU_CHUNK) -> torch.Tensor:
    """``(N, K)`` -> ``(N, N)`` float32 via the split-K BLAS Gram (see :mod:`vitplast_kernels.ops.all_pairs`).
    Runs on torch's intra-op threads as the caller configured them (no process-wide setting changes)."""
    n = a.shape[0]
    x = a.to(torch.float32)
    if x.stride(1) != 1:
        x = x.contiguous()
    centred = _probe_wants_centring(x, chunk)
    if centred:
        x = x - x[:1]  # anchor row: one read and one write pass (the mean row would add a read)
    sq, unreliable, _ = _gram_sq(x, chunk)
    if not centred and int(unreliable.sum()) > n // 2:  # the probe missed it
        sq, unreliable, _ = _gram_sq(x - x[:1], chunk)
    out = sq.to(torch.float32)
    rows, cols = unreliable.nonzero(as_tuple=True)
    if rows.numel():
        out[rows, cols] = _recompute_pairs(a, rows, cols)
    out = out.tril(-1)
    return out + out.T


register_backend(Backend("cpu", ("cpu",), cpu_extension_available, require_cpu_extension,
                         dispatcher_pair_sq, dispatcher_grouped, all_pairs=_all_pairs_cpu))
