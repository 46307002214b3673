"""Statistics of `vitplast claim`, from ``scipy.stats`` where scipy has them.

- ranks, Spearman's rho, Kendall's tau-b: ``rankdata``, ``pearsonr`` of the ranks (vectorised over
  bootstrap replicates), ``kendalltau(variant="b")``;
- permutation p-values: ``permutation_test(permutation_type="pairings")``, every permutation
  enumerated up to `EXACT_PERMUTATION_LIMIT` items, else sampled;
- Student-t intervals: ``t``; the trend line: ``theilslopes``.

What scipy lacks is here: the **stratified** permutation test (gains permuted only among rows of the
same stratum, e.g. the same component type, whose trainable size is constant), the **partial**
Spearman correlation (plasticity vs gain with the trainable-parameter count held fixed), the
percentile bootstrap helpers (the joint resampling of seeds and pair chunks is `.samples`'), and the
tests the analyses run on their arrays (`rank_tests`, `association`, `within_association`). Pure
functions on arrays: nothing here calls the rest of the claim.

p-values: ``greater`` is the share of permutations whose statistic is >= the observed one (the
claim's direction: more plastic, more gain). ``two_sided`` is **scipy's definition, twice the smaller
one-sided p** (capped at 1), not the share with ``|statistic| >= |observed|``; for a null distribution
symmetric about 0 (Spearman and Kendall under permutation) the two agree. Exact p: hits / number of
permutations (the observed order among them); sampled: (1 + hits) / (1 + permutations).
Undefined values (a constant vector has no rank correlation; one seed has no t interval) are NaN.

The paired comparisons of MHA against each other component are `.paired_tests`'.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings

import numpy as np
from scipy import stats

# enumerate every permutation up to this many items (8! = 40320); beyond it, draw at random
EXACT_PERMUTATION_LIMIT = 8
# enumerate every within-stratum permutation when there are at most this many (else draw at random)
EXACT_STRATIFIED_LIMIT = 50_000


def average_ranks(x) -> np.ndarray:
    """Ranks 1..n along the last axis, ties sharing their mean rank (``scipy.stats.rankdata``)."""
    return stats.rankdata(np.asarray(x, dtype=np.float64), axis=-1)


def spearman(x, y) -> np.ndarray | float:
    """Spearman's rho along the last axis: Pearson's r of the average ranks (NaN when a vector is
    constant). Broadcasts, so ``(B, n)`` bootstrap replicates are one call."""
    rx, ry = average_ranks(x), average_ranks(y)
    if rx.shape[-1] != ry.shape[-1]:
        raise ValueError(f"spearman: lengths differ ({rx.shape[-1]} vs {ry.shape[-1]})")
    rx, ry = np.broadcast_arrays(rx, ry)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        out = np.asarray(stats.pearsonr(rx, ry, axis=-1).statistic, dtype=np.float64)
    return float(out) if out.ndim == 0 else out


def kendall_tau_b(x, y) -> np.ndarray | float:
    """Kendall's tau-b (``scipy.stats.kendalltau(variant="b")``) along the last axis."""
    a, b = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    flat_a, flat_b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    out = np.empty(len(flat_a))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for i, (u, v) in enumerate(zip(flat_a, flat_b, strict=True)):
            if np.ptp(u) == 0 or np.ptp(v) == 0:
                out[i] = np.nan
            else:
                out[i] = stats.kendalltau(u, v, variant="b").statistic
    out = out.reshape(a.shape[:-1])
    return float(out) if out.ndim == 0 else out


STATISTICS = {"spearman": spearman, "kendall": kendall_tau_b}


@dataclasses.dataclass(frozen=True)
class PermutationTest:
    """A statistic's ``observed`` value and its permutation p-values (``greater``: one-sided, H1 > 0;
    ``two_sided``), whether every permutation was enumerated (``exact``, None when undefined) and how
    many there were; a stratified test's number of ``strata``; with bootstrap replicates the
    statistic's percentile ``interval`` and how many replicates define it (``defined``)."""

    observed: float
    greater: float
    two_sided: float
    exact: bool | None
    permutations: int
    strata: int | None = None
    interval: tuple | None = None
    defined: int | None = None


@dataclasses.dataclass(frozen=True)
class Association:
    """How one score ranks the gains: ``spearman`` with its bootstrap ``interval``, ``kendall``, the
    one-sided permutation p of Spearman (``p_greater``) and the ``partial`` Spearman with the size held
    fixed (NaN: not computed or undefined)."""

    spearman: float
    interval: tuple | None = None
    kendall: float = math.nan
    p_greater: float = math.nan
    partial: float = math.nan


def _nan_result(observed: float, strata: int | None = None) -> PermutationTest:
    return PermutationTest(observed, math.nan, math.nan, None, 0, strata)


def permutation_test(x, y, statistic, *, permutations: int = 10000, seed: int = 0) -> PermutationTest:
    """p-values of ``statistic(x, y)`` under "y's order is exchangeable" (y unrelated to x), through
    ``scipy.stats.permutation_test(permutation_type="pairings")`` on y alone. Up to
    `EXACT_PERMUTATION_LIMIT` items every permutation is enumerated, beyond ``permutations``
    random ones."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = y.shape[-1]
    observed = float(statistic(x, y))
    if not math.isfinite(observed):
        return _nan_result(observed)
    n_res = max(permutations, math.factorial(n)) if n <= EXACT_PERMUTATION_LIMIT else permutations

    def stat(yy, axis=-1):
        v = np.asarray(statistic(np.broadcast_to(x, yy.shape), yy), dtype=np.float64)
        return np.where(np.isfinite(v), v, 0.0)

    res = stats.permutation_test((y,), stat, permutation_type="pairings", n_resamples=n_res,
                                 alternative="greater", vectorized=True, rng=np.random.default_rng(seed))
    exact = n_res >= math.factorial(n)
    count = math.factorial(n) if exact else n_res
    # scipy's "less" from the same null distribution, with scipy's tolerance and +1 rule
    greater, less = float(res.pvalue), _p_value(res.null_distribution, observed, count, exact, greater=False)
    return PermutationTest(observed, greater, min(1.0, 2 * min(greater, less)), exact, count)


def _p_value(null: np.ndarray, observed: float, count: int, exact: bool, *, greater: bool) -> float:
    """The one-sided p of ``observed`` among the ``count`` values of ``null``: the share at or above it
    (``greater``) or at or below it, null values within scipy.stats.permutation_test's tolerance (100
    ulps, relative) of the observed tying; hits / count when ``exact``, else (1 + hits) / (1 + count)."""
    tol = abs(observed) * float(np.finfo(np.float64).eps) * 100
    hits = int((null >= observed - tol).sum() if greater else (null <= observed + tol).sum())
    return hits / count if exact else (1 + hits) / (1 + count)


# ------------------------------------------------------------------------------------------ strata
def within_strata(x, y, strata, statistic=spearman) -> tuple[dict, float]:
    """Per stratum ``statistic(x, y)`` and their size-weighted mean over the strata where it is
    defined (the pooled within-stratum association): ``({stratum: value}, pooled)``."""
    x, y, strata = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(strata)
    per, num, den = {}, 0.0, 0
    for s in dict.fromkeys(strata.tolist()):
        m = strata == s
        v = float(statistic(x[m], y[m])) if m.sum() >= 2 else math.nan
        per[s] = v
        if math.isfinite(v):
            num, den = num + v * int(m.sum()), den + int(m.sum())
    return per, num / den if den else math.nan


def pooled_within(x: np.ndarray, ys: np.ndarray, strata: np.ndarray, statistic) -> np.ndarray:
    """``(R,)``: for each row of ``ys`` ``(R, n)``, ``statistic`` of ``x`` ``(n,)`` and the row within
    each stratum, averaged over the strata weighted by their items (strata where it is undefined left
    out): `within_strata` for many rows at once."""
    num, den = np.zeros(len(ys)), np.zeros(len(ys))
    for s in dict.fromkeys(strata.tolist()):
        m = strata == s
        if m.sum() < 2:
            continue
        v = np.asarray(statistic(np.broadcast_to(x[m], ys[:, m].shape), ys[:, m]), dtype=np.float64)
        num, den = num + np.where(np.isfinite(v), v * m.sum(), 0.0), den + np.isfinite(v) * m.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def _linked_groups(strata: np.ndarray, units, blocks) -> list[np.ndarray]:
    """The rows permuted together: per block, a ``(strata of the block, units)`` array of row indices,
    each stratum's rows in the order of the block's units (without ``units``: each stratum alone, its
    rows as they come). A block whose strata do not hold the same units is split into its strata."""
    names = list(dict.fromkeys(strata.tolist()))
    if units is None or blocks is None:
        return [np.flatnonzero(strata == s)[None, :] for s in names]
    units, blocks, out = np.asarray(units), np.asarray(blocks), []
    for b in dict.fromkeys(blocks.tolist()):
        rows = [np.flatnonzero(strata == s) for s in names if (blocks[strata == s] == b).all()]
        order = list(units[rows[0]])
        same = all(len(r) == len(order) and set(units[r]) == set(order) for r in rows)
        out += ([np.array([r[np.argsort([order.index(u) for u in units[r]])] for r in rows])] if same
                else [r[None, :] for r in rows])
    return out


def stratified_permutation_test(x, y, strata, *, statistic=spearman, permutations: int = 10000,
                                seed: int = 0, units=None, blocks=None) -> PermutationTest:
    """Permutation test of the pooled within-stratum ``statistic`` (`within_strata`), ``y``
    permuted **only among rows of the same stratum**: between-stratum differences (e.g. of size) are
    held fixed, so only the association inside each stratum can make p small. Every combination of
    within-stratum permutations is enumerated when there are at most `EXACT_STRATIFIED_LIMIT`
    (p = hits / count), else ``permutations`` are drawn (p = (1 + hits) / (1 + permutations)).
    ``two_sided``: twice the smaller one-sided p, as scipy's.

    ``units`` and ``blocks`` (per row): strata of one block are repeated measures of the same units (a
    dataset's arms, one per optimiser, rank the same components): one permutation of the block's units
    is applied to all of its strata, so a unit measured twice counts as one unit, not two independent
    ones (permuting each arm alone would make p too small)."""
    x, y, strata = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(strata)
    if not (x.shape == y.shape == strata.shape) or x.ndim != 1:
        raise ValueError(f"stratified_permutation_test: x, y and strata must be 1-D of one length, got "
                         f"{x.shape}, {y.shape}, {strata.shape}")
    groups = _linked_groups(strata, units, blocks)
    _, observed = within_strata(x, y, strata, statistic)
    if not math.isfinite(observed):
        return _nan_result(observed, len(set(strata.tolist())))
    count = math.prod(math.factorial(g.shape[1]) for g in groups)
    if exact := count <= EXACT_STRATIFIED_LIMIT:
        orders = np.empty((count, len(y)), dtype=np.int64)
        for row, combo in enumerate(itertools.product(*(itertools.permutations(range(g.shape[1]))
                                                        for g in groups))):
            for g, perm in zip(groups, combo, strict=True):
                orders[row, g] = g[:, list(perm)]
    else:
        rng = np.random.default_rng(seed)
        orders = np.tile(np.arange(len(y)), (permutations, 1))
        for g in groups:
            perm = np.argsort(rng.random((permutations, g.shape[1])), axis=1)  # (P, units)
            for rows in g:
                orders[:, rows] = rows[perm]
    null = pooled_within(x, y[orders], strata, statistic)
    greater, less = (_p_value(null, observed, len(orders), exact, greater=g) for g in (True, False))
    return PermutationTest(observed, greater, min(1.0, 2 * min(greater, less)), exact, len(orders),
                           len(set(strata.tolist())))


# ------------------------------------------------------------------------------------------ partial
def partial_spearman(x, y, z) -> np.ndarray | float:
    """Spearman correlation of ``x`` and ``y`` with ``z`` held fixed, along the last axis: the
    partial correlation of the ranks, ``(r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2))``
    (Pearson's r of the rank residuals after regressing each on z's ranks). NaN when undefined."""
    rxy, rxz, ryz = (np.asarray(spearman(a, b), dtype=np.float64) for a, b in ((x, y), (x, z), (y, z)))
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.sqrt((1 - rxz**2) * (1 - ryz**2))
        out = np.where(den > 1e-12, (rxy - rxz * ryz) / np.where(den > 1e-12, den, 1.0), np.nan)
    out = np.clip(out, -1.0, 1.0)
    return float(out) if out.ndim == 0 else out


def partial_p_greater(r: float, n: int, controls: int = 1) -> float:
    """One-sided p of a partial correlation ``r`` > 0 from Student's t with ``n - 2 - controls``
    degrees of freedom (``scipy.stats.t``): ``t = r sqrt(df / (1 - r^2))``. An approximation for
    ranks; NaN when undefined."""
    df = n - 2 - controls
    if not math.isfinite(r) or df < 1:
        return math.nan
    if abs(r) >= 1:
        return 0.0 if r > 0 else 1.0
    return float(stats.t.sf(r * math.sqrt(df / (1 - r * r)), df))


# ------------------------------------------------------------------------------------------ intervals
def percentile_interval(values, level: float = 0.95) -> tuple[float, float]:
    """``(lo, hi)`` percentiles of the finite ``values`` around ``level`` (NaN when none is finite)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(v, [a, 1.0 - a])
    return float(lo), float(hi)


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the Student-t interval (``scipy.stats.t``) of the mean of independent
    ``values`` (across seeds). One value: NaN interval; identical values: a point."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if v.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2.0, v.size - 1)) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return mean, mean - half, mean + half


def theil_sen(x, y) -> tuple[float, float]:
    """``(slope, intercept)`` of the Theil-Sen line (``scipy.stats.theilslopes``): the median of the
    pairwise slopes, intercept ``median(y) - slope * median(x)``. One outlying point cannot tilt it.
    NaN when all x are equal."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2 or np.ptp(x) == 0:
        return math.nan, math.nan
    res = stats.theilslopes(y, x)
    return float(res.slope), float(res.intercept)


# ------------------------------------------------------------------------------------------ bootstrap size
# a percentile bootstrap over fewer resampling units than this gives no interval (its replicates take a
# handful of values, and its coverage is far below the nominal level)
MIN_BOOTSTRAP_UNITS = 5


def too_few_to_resample(**units: int) -> str | None:
    """Why a bootstrap over these resampling units (``seeds=3, pair_chunks=8``) gives no interval, or
    None when each has at least `MIN_BOOTSTRAP_UNITS`."""
    few = [f"{n} {name.replace('_', ' ')}" for name, n in units.items() if n < MIN_BOOTSTRAP_UNITS]
    if not few:
        return None
    return f"no bootstrap interval: {' and '.join(few)} to resample (fewer than {MIN_BOOTSTRAP_UNITS})"


# ------------------------------------------------------------------------------------------ the claim's tests
def rank_tests(x, y, x_reps=None, y_reps=None, *, permutations: int, seed: int,
               level: float = 0.95) -> dict[str, PermutationTest]:
    """Every statistic of `STATISTICS` between ``x`` and ``y`` (1-D): its value, its `permutation_test`
    p-values (``greater``, ``two_sided``, ``exact``, ``permutations``) and, with bootstrap replicates
    ``x_reps``, ``y_reps`` ``(B, n)``, its `percentile_interval` over them (``interval``, None
    without) and how many replicates define it (``defined``), by statistic name."""
    out = {}
    for name, statistic in STATISTICS.items():
        perm = permutation_test(x, y, statistic, permutations=permutations, seed=seed)
        reps = None if x_reps is None else np.asarray(statistic(x_reps, y_reps))
        out[name] = perm if reps is None else dataclasses.replace(
            perm, interval=percentile_interval(reps, level), defined=int(np.isfinite(reps).sum()))
    return out


def association(x, y, y_reps, z, *, permutations: int, seed: int, level: float = 0.95) -> Association:
    """How ``x`` ranks ``y`` (1-D, at least 3 items): ``spearman`` with its `percentile_interval` over
    the bootstrap replicates ``y_reps`` ``(B, n)`` of ``y`` (``interval``), ``kendall``, the one-sided
    permutation p of Spearman (``p_greater``) and the `partial_spearman` with ``z`` held fixed."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    perm = permutation_test(x, y, spearman, permutations=permutations, seed=seed)
    reps = np.asarray(spearman(np.broadcast_to(x, y_reps.shape), y_reps))
    return Association(float(spearman(x, y)), percentile_interval(reps, level), float(kendall_tau_b(x, y)),
                       perm.greater, float(partial_spearman(x, y, z)))


def criterion_tests(scored: dict, units: list[str], gain, g_reps, sizes, types, *, permutations: int,
                    seed: int, level: float = 0.95) -> tuple[dict[str, Association], dict[str, int]]:
    """Each criterion's association with the gains over the units where both are defined (at least
    three): within types when ``types`` is given (some type holds several units), else over all.
    ``scored``: ``{criterion: {unit: score}}``; returns the associations and, by criterion, on how many
    of ``units`` both are defined."""
    out, counts = {}, {}
    for name, per_unit in scored.items():
        x = np.array([math.nan if per_unit.get(u) is None else per_unit[u] for u in units], dtype=np.float64)
        ok = np.isfinite(x) & np.isfinite(gain)
        counts[name] = int(ok.sum())
        if ok.sum() < 3:
            continue
        if types is not None:
            out[name] = within_association(x[ok], gain[ok], types[ok], g_reps[:, ok], sizes[ok],
                                           permutations=permutations, seed=seed, level=level)
        else:
            out[name] = association(x[ok], gain[ok], g_reps[:, ok], sizes[ok], permutations=permutations,
                                    seed=seed, level=level)
    return out, counts


def within_association(x, y, strata, y_reps, z, *, permutations: int, seed: int,
                       level: float = 0.95) -> Association:
    """`association` within strata: the pooled within-stratum Spearman (`pooled_within`, NaN with
    fewer than 3 items; then nothing else is computed) with its interval over ``y_reps``, the pooled
    Kendall, the one-sided `stratified_permutation_test` p and the `partial_spearman` over all items
    with ``z`` held fixed."""
    x, y, strata = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(strata)
    rho = float(pooled_within(x, y[None], strata, spearman)[0]) if len(x) >= 3 else math.nan
    if not math.isfinite(rho):
        return Association(rho)
    test = stratified_permutation_test(x, y, strata, permutations=permutations, seed=seed)
    reps = pooled_within(x, y_reps, strata, spearman)
    kendall = float(pooled_within(x, y[None], strata, kendall_tau_b)[0])
    return Association(rho, percentile_interval(reps, level), kendall, test.greater,
                       float(partial_spearman(x, y, z)))


def per_stratum_spearman(x, y, x_reps, y_reps, strata, level: float = 0.95) -> dict[str, Association]:
    """Spearman's rho of ``x`` and ``y`` within each stratum, with its `percentile_interval` over the
    bootstrap replicates ``x_reps``, ``y_reps`` ``(B, n)``, by stratum."""
    out = {}
    for s in dict.fromkeys(strata.tolist()):
        m = strata == s
        out[s] = Association(float(spearman(x[m], y[m])),
                             percentile_interval(np.asarray(spearman(x_reps[:, m], y_reps[:, m])), level))
    return out


def bounded_t_interval(values, bounds: tuple[float, float], level: float = 0.95) -> tuple:
    """`t_interval` of ``values`` cut to ``bounds`` (with few seeds the t interval can reach beyond what
    an accuracy or a gain can be): ``(mean, lo, hi, clipped)``, ``clipped`` naming the bound(s) it was
    cut at (``"low"``, ``"high"``, ``"both"``, None); an undefined bound stays NaN."""
    mean, lo, hi = t_interval(values, level)
    cut_lo, cut_hi = math.isfinite(lo) and lo < bounds[0], math.isfinite(hi) and hi > bounds[1]
    clipped = "both" if cut_lo and cut_hi else "low" if cut_lo else "high" if cut_hi else None
    lo, hi = max(lo, bounds[0]) if math.isfinite(lo) else lo, min(hi, bounds[1]) if math.isfinite(hi) else hi
    return mean, lo, hi, clipped
