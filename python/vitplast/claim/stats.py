"""Statistics of `vitplast claim`, in numpy only: ranks with ties, Spearman's rho, Kendall's tau-b,
permutation p-values, percentile bootstrap intervals, Student-t intervals and the Theil-Sen line.

Every function takes plain arrays. The rank functions work along the last axis, so a stack of
bootstrap replicates ``(B, n)`` is handled in one call. Undefined values (a constant vector has no
rank correlation; one seed has no t interval) are NaN, never an exception.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

# enumerate every permutation up to this many items (8! = 40320); beyond it, draw at random
EXACT_PERMUTATION_LIMIT = 8


def average_ranks(x) -> np.ndarray:
    """Ranks 1..n along the last axis; tied values share the mean of the ranks they span.

    ``[10, 20, 20, 5]`` -> ``[2, 3.5, 3.5, 1]``. Computed by comparison counts (O(n^2) per row; the
    vectors here are a handful of components): rank = #smaller + (#equal + 1) / 2.
    """
    a = np.asarray(x, dtype=np.float64)
    less = (a[..., None, :] < a[..., :, None]).sum(-1)
    equal = (a[..., None, :] == a[..., :, None]).sum(-1)
    return less + (equal + 1) / 2.0


def _pearson_last(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(-1, keepdims=True)
    b = b - b.mean(-1, keepdims=True)
    den = np.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    num = (a * b).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.clip(out, -1.0, 1.0)


def spearman(x, y) -> np.ndarray | float:
    """Spearman's rho along the last axis: Pearson's correlation of the average ranks (ties
    included). NaN when either vector is constant."""
    rx, ry = average_ranks(x), average_ranks(y)
    if rx.shape[-1] != ry.shape[-1]:
        raise ValueError(f"spearman: lengths differ ({rx.shape[-1]} vs {ry.shape[-1]})")
    out = _pearson_last(rx, ry)
    return float(out) if out.ndim == 0 else out


def kendall_tau_b(x, y) -> np.ndarray | float:
    """Kendall's tau-b along the last axis: ``(C - D) / sqrt((n0 - tx) (n0 - ty))`` with ``C``/``D``
    the concordant/discordant pairs, ``n0 = n (n - 1) / 2`` and ``tx``/``ty`` the pairs tied in x/y.
    NaN when either vector is constant."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"kendall_tau_b: lengths differ ({a.shape[-1]} vs {b.shape[-1]})")
    n = a.shape[-1]
    iu = np.triu_indices(n, 1)
    sx = np.sign(a[..., :, None] - a[..., None, :])[..., iu[0], iu[1]]
    sy = np.sign(b[..., :, None] - b[..., None, :])[..., iu[0], iu[1]]
    s = (sx * sy).sum(-1)
    untied_x = (sx != 0).sum(-1)
    untied_y = (sy != 0).sum(-1)
    den = np.sqrt(untied_x * untied_y.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, s / np.where(den > 0, den, 1.0), np.nan)
    out = np.clip(out, -1.0, 1.0)
    return float(out) if out.ndim == 0 else out


STATISTICS = {"spearman": spearman, "kendall": kendall_tau_b}


def permutation_test(x, y, statistic, *, permutations: int = 10000, seed: int = 0) -> dict:
    """p-values of ``statistic(x, y)`` under "y is unrelated to x" (y's order exchangeable).

    Up to :data:`EXACT_PERMUTATION_LIMIT` items every permutation is enumerated (the observed order
    among them, so the smallest p is ``1 / n!``); beyond, ``permutations`` random ones, with
    ``(1 + hits) / (1 + permutations)``. ``greater``: share of permutations whose statistic is >= the
    observed (the claim's direction: more plastic, more gain); ``two_sided``: share whose absolute
    value is >= the observed absolute value. A tolerance of 1e-12 counts exact ties as hits.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = x.shape[-1]
    observed = float(statistic(x, y))
    if not math.isfinite(observed):
        return {"observed": observed, "greater": math.nan, "two_sided": math.nan, "exact": None,
                "permutations": 0}
    if n <= EXACT_PERMUTATION_LIMIT:
        order = np.array(list(itertools.permutations(range(n))), dtype=np.int64)
        exact = True
    else:
        rng = np.random.default_rng(seed)
        order = np.argsort(rng.random((permutations, n)), axis=1)
        exact = False
    null = np.asarray(statistic(np.broadcast_to(x, order.shape), y[order]), dtype=np.float64)
    null = np.where(np.isfinite(null), null, 0.0)
    tol = 1e-12
    hits_g = int((null >= observed - tol).sum())
    hits_2 = int((np.abs(null) >= abs(observed) - tol).sum())
    if exact:
        greater, two = hits_g / len(order), hits_2 / len(order)
    else:
        greater, two = (1 + hits_g) / (1 + len(order)), (1 + hits_2) / (1 + len(order))
    return {"observed": observed, "greater": greater, "two_sided": two, "exact": exact,
            "permutations": len(order)}


def percentile_interval(values, level: float = 0.95) -> tuple[float, float]:
    """``(lo, hi)`` percentiles of the finite ``values`` around ``level`` (NaN when none is finite)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(v, [a, 1.0 - a])
    return float(lo), float(hi)


def resample_counts(rng: np.random.Generator, n: int, replicates: int) -> np.ndarray:
    """``(replicates, n)`` multiplicities of a bootstrap resample of ``n`` units (each row sums to n)."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=replicates).astype(np.float64)


# ------------------------------------------------------------------------------------------ Student t
def student_t_cdf(t: float, df: int) -> float:
    """CDF of Student's t with an integer number of degrees of freedom, in closed form.

    With ``theta = atan(t / sqrt(df))`` and ``c = cos(theta)^2``, ``A = P(|T| <= |t|)`` is
    ``(2/pi) (theta + sin(theta) cos(theta) (1 + 2/3 c + 2*4/(3*5) c^2 + ...))`` (df odd, the sum
    has (df - 1) / 2 terms) or ``sin(theta) (1 + 1/2 c + 1*3/(2*4) c^2 + ...)`` (df even, df / 2
    terms); the CDF is ``(1 + sign(t) A) / 2``.
    """
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be a positive integer, got {df!r}")
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta) ** 2
    if df % 2:
        term, total = 1.0, 0.0
        for k in range((df - 1) // 2):
            total += term
            term *= c * (2 * k + 2) / (2 * k + 3)
        a = (2 / math.pi) * (theta + (s * math.cos(theta) * total if df > 1 else 0.0))
    else:
        term, total = 1.0, 0.0
        for k in range(df // 2):
            total += term
            term *= c * (2 * k + 1) / (2 * k + 2)
        a = s * total
    a = min(max(a, 0.0), 1.0)
    return 0.5 + math.copysign(a, t) / 2 if t else 0.5


def student_t_quantile(p: float, df: int) -> float:
    """Inverse of :func:`student_t_cdf` (bisection to double precision)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if student_t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the Student-t interval of the mean of independent ``values`` (across
    seeds). With one value the interval is undefined (NaN); with identical values it is a point."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if v.size < 2:
        return mean, math.nan, math.nan
    sem = float(v.std(ddof=1)) / math.sqrt(v.size)
    half = student_t_quantile(0.5 + level / 2.0, int(v.size - 1)) * sem
    return mean, mean - half, mean + half


# ------------------------------------------------------------------------------------------ trend
def theil_sen(x, y) -> tuple[float, float]:
    """``(slope, intercept)`` of the Theil-Sen line: the median of the slopes between every two points
    with distinct x, and the median of ``y - slope * x``. It is the slope at which the residuals have
    Kendall's tau 0 against x, so it is the line that matches the rank statistics reported beside it,
    and one outlying point cannot tilt it. NaN when all x are equal."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(x.size, 1)
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        return math.nan, math.nan
    slope = float(np.median((y[j] - y[i])[keep] / dx[keep]))
    return slope, float(np.median(y - slope * x))
