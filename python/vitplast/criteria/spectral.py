"""``spectral``: the power-law exponent of the eigenvalues of each weight matrix's correlation matrix."""

from __future__ import annotations

import math

import numpy as np
import torch

from .base import Cost, Criterion, Setting, Units, unit_grid

# the fewest eigenvalues a tail may hold (a fit on fewer is not a fit)
MIN_TAIL = 5


def power_law_fit(eigenvalues, min_tail: int = MIN_TAIL) -> tuple[float, float, float, int]:
    """``(alpha, xmin, ks_distance, tail size)`` of the continuous power law ``p(x) ∝ x^-alpha`` for
    ``x >= xmin`` fitted to the positive ``eigenvalues`` (float64): for each candidate ``xmin`` (every
    distinct value leaving at least ``min_tail`` values in the tail) the maximum-likelihood
    ``alpha = 1 + n / Σ_i ln(x_i / xmin)``, and the Kolmogorov-Smirnov distance between the tail's
    empirical CDF and ``1 - (x / xmin)^(1 - alpha)``; the ``xmin`` with the smallest distance wins (ties:
    the smallest ``xmin``). Clauset, Shalizi & Newman, *Power-law distributions in empirical data*, SIAM
    Review 2009, section 3. NaN values when fewer than ``min_tail`` positive eigenvalues exist."""
    x = np.sort(np.asarray(eigenvalues, dtype=np.float64))
    x = x[np.isfinite(x) & (x > 0)]
    n_all = x.size  # fewer than min_tail: no candidate, the NaN values below
    best = (math.inf, math.nan, math.nan, 0)
    logs = np.log(x)
    for start in range(n_all - min_tail + 1):
        if start > 0 and x[start] == x[start - 1]:
            continue  # one candidate per distinct value (its first occurrence keeps every equal value)
        tail, n = x[start:], n_all - start
        denom = float((logs[start:] - logs[start]).sum())
        if denom <= 0:
            continue
        alpha = 1.0 + n / denom
        model = 1.0 - (tail / tail[0]) ** (1.0 - alpha)
        ranks = np.arange(1, n + 1, dtype=np.float64)
        ks = float(np.max(np.maximum(np.abs(ranks / n - model), np.abs((ranks - 1) / n - model))))
        if ks < best[0]:
            best = (ks, alpha, float(tail[0]), n)
    ks, alpha, xmin, n = best
    return (alpha, xmin, ks, n) if math.isfinite(ks) else (math.nan, math.nan, math.nan, 0)


def weight_matrices(net: torch.nn.Module, units: Units, unit: tuple[str, int]) -> dict[str, torch.Tensor]:
    """The unit's weight matrices by parameter name: every parameter named ``weight`` with 2 dimensions
    (attention's qkv and output projection separately, fc1, fc2; LayerNorm weights are 1-D)."""
    return {n: p for n, p in units.parameters(net, unit).items()
            if n.rsplit(".", 1)[-1] == "weight" and p.dim() == 2}


class Spectral(Criterion):
    """Heavy-tailed self-regularisation's power-law exponent alpha.

    For each weight matrix ``W`` (``out x in``) of the unit, the eigenvalues ``λ`` of ``WᵀW`` (the squared
    singular values of ``W``, float64; the zero eigenvalues of a wide ``W`` left out) are fitted by a power
    law ``p(λ) ∝ λ^-alpha`` above ``xmin`` by maximum likelihood, ``xmin`` chosen by the smallest
    Kolmogorov-Smirnov distance (`power_law_fit`; Clauset, Shalizi & Newman 2009). The unit's score is the
    mean alpha of its matrices: a **larger alpha, a less trained matrix** (Martin & Mahoney, *Implicit
    self-regularization in deep neural networks*, JMLR 2021), so higher = finetune first. Units without a
    weight matrix (LayerNorms) are not defined (NaN, null in the JSON), never 0. Reads only the weights. Extra
    values: ``matrices`` (how many were fitted) and ``ks`` (their mean KS distance).
    """

    name = "spectral"
    value_range = (1.0, math.inf)  # alpha = 1 + n / sum(ln(x / xmin)), each log >= 0
    needs = frozenset({"weights"})

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        fits = {u: [] for u in units.modules}
        for u, found in fits.items():
            for w in weight_matrices(net, units, u).values():
                sv = torch.linalg.svdvals(w.detach().to("cpu", torch.float64))
                alpha, _, dist, _ = power_law_fit((sv * sv).numpy())
                if math.isfinite(alpha):
                    found.append((alpha, dist))
        fitted = {u: found for u, found in fits.items() if found}
        return unit_grid(units, {u: float(np.mean([a for a, _ in f])) for u, f in fitted.items()}), {
            "matrices": unit_grid(units, {u: len(found) for u, found in fits.items()}),
            "ks": unit_grid(units, {u: float(np.mean([d for _, d in f])) for u, f in fitted.items()})}
