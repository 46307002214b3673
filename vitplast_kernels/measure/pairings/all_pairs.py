"""``pairs="all"``: every distinct pair ``i < j`` of a batch of ``N`` sequences (the U-statistic).

Per captured tensor the ``(N, N)`` float64 squared-distance matrix comes from `all_pair_sq_sums`
(Gram matrices, exact to 1e-5 per pair, see `vitplast_kernels.ops.all_pairs`); the scheme hands
capture the strict upper triangle in row-major order, ``P = N (N - 1) / 2`` sums per tensor. Several
forward passes each contribute their own pairs (pairs never straddle two batches).

Statistics: the five sums of `pair_stats` (pairs used, sum
and sum of squares of their rates, identical pairs excluded, non-finite pairs) plus a sixth, ``var_w``:

    var_w = count_b^2 * Var_jack(U_b)            (summed over batches b, and over ranks)

where ``U_b`` is the batch's mean rate over its used pairs and ``Var_jack`` its **jackknife over
sequences** estimate: ``U_(-i)`` is the mean over the used pairs not involving sequence ``i``,
``Var_jack = (N - 1) / N * sum_i (U_(-i) - mean_i U_(-i))^2``. The pairs of a batch share members,
so the rates are *not* independent and ``std / sqrt(pairs)`` understates the error by a factor of
order ``sqrt(N)``; to first order ``Var_jack = 4 zeta_1 / N`` (Hoeffding's decomposition of a
U-statistic of order 2, ``zeta_1 = Var_x E_y[rate(x, y)]``), and the jackknife handles the excluded
pairs (identical, non-finite) without further assumptions. The overall mean is
``sum_b sum_rates_b / sum_b count_b = sum_b (count_b / count) U_b`` and, batches being independent,
its variance is ``sum_b var_w_b / count^2``: `PlasticityResult` uses
it for the standard error and the 95% CI (``mean +- 1.96 sqrt(var_w) / count``) when the result has
this sixth field. A batch where some ``U_(-i)`` is undefined (e.g. ``N = 2``: one pair) makes the
variance NaN: one pair carries no information on its own spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ...ops.all_pairs import all_pair_sq_sums
from .base import Pairing, register_pairing, stats_of, used_rates
from .fields import U_STAT_FIELDS

_BACKEND_ALIASES = {"cuda": "triton"}  # paired-op backends without an all-pairs twin
_triu_cache: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}


def triu_pairs(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, cols)`` int64 of the ``n (n - 1) / 2`` pairs ``i < j``, row-major (the pair order)."""
    key = (n, torch.device(device))
    if key not in _triu_cache:
        iu = torch.triu_indices(n, n, 1, device=device)
        _triu_cache[key] = (iu[0], iu[1])
    return _triu_cache[key]


def n_from_pairs(p: int) -> int:
    n = (1 + math.isqrt(1 + 8 * p)) // 2
    if n * (n - 1) // 2 != p:
        raise ValueError(f"{p} is not a number of distinct pairs N(N-1)/2")
    return n


def u_stats(s_in: torch.Tensor, s_out: torch.Tensor) -> torch.Tensor:
    """``(..., P)`` triangle sums of one batch -> ``(..., 6)`` float64 ``[count, sum, sumsq, identical,
    nonfinite, var_w]`` (see the module docstring). No host-device synchronisation."""
    s_in = s_in.detach().to(torch.float64)
    s_out = s_out.detach().to(torch.float64)
    s_in, s_out = torch.broadcast_tensors(s_in, s_out)
    n = n_from_pairs(s_in.shape[-1])
    masks = used_rates(s_in, s_out)  # the same used / identical / non-finite rules as every scheme
    base = stats_of(*masks)
    r, valid = masks[0], masks[1]
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    v = valid.to(torch.float64)
    rows, cols = triu_pairs(n, r.device)
    # every pair belongs to both of its sequences: per-sequence sums over the symmetric (N, N) matrix
    # (a scatter to distinct positions and a fixed-order sum: deterministic, no atomics)
    mat = torch.zeros((2, *r.shape[:-1], n, n), dtype=torch.float64, device=r.device)
    mat[..., rows, cols] = torch.stack([r, v])
    row_sum, row_cnt = (mat + mat.transpose(-1, -2)).sum(-1)
    count = v.sum(-1, keepdim=True)
    loo_cnt = count - row_cnt
    loo = (r.sum(-1, keepdim=True) - row_sum) / loo_cnt  # NaN/inf where undefined
    var_jack = (n - 1) / n * (loo - loo.mean(-1, keepdim=True)).square().sum(-1)
    var_jack = torch.where((loo_cnt > 0).all(-1), var_jack, torch.full_like(var_jack, float("nan")))
    var_w = torch.where(count[..., 0] > 0, count[..., 0].square() * var_jack, zero)
    return torch.cat([base, var_w.unsqueeze(-1)], dim=-1)


class AllPairs(Pairing):
    """Every distinct pair ``i < j`` of a batch of ``N >= 2`` sequences: ``N (N - 1) / 2`` pairs."""

    name = "all"
    stat_fields = U_STAT_FIELDS

    def fits(self, n: int) -> bool:
        return n >= 2

    def problem(self, n: int, where: str) -> str | None:
        if self.fits(n):
            return None
        return (f"pairs='all' needs a batch of at least 2 sequences (every pair i < j is compared), got "
                f"{n} sequence(s) in {where}")

    def n_pairs(self, n: int) -> int:
        return n * (n - 1) // 2

    def sq_sums(self, tensors: Sequence[torch.Tensor], *, backend: str = "auto") -> torch.Tensor:
        tensors = list(tensors)
        n = tensors[0].shape[0]
        rows, cols = triu_pairs(n, tensors[0].device)
        backend = _BACKEND_ALIASES.get(backend, backend)
        return torch.stack([all_pair_sq_sums(t, backend=backend)[rows, cols] for t in tensors])

    def stats(self, s_in: torch.Tensor, s_out: torch.Tensor) -> torch.Tensor:
        return u_stats(s_in, s_out)


register_pairing("all", AllPairs)
