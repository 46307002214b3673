"""vitplast.claim.statistics: scipy-backed rank statistics and permutation tests against hand-countable
cases, the stratified permutation test and the partial Spearman correlation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps
from vitplast.claim import statistics as S
from vitplast.claim.budgets import quantile_summary
from vitplast.claim.samples import resample_counts
from vitplast.claim.statistics import (
    average_ranks,
    kendall_tau_b,
    percentile_interval,
    permutation_test,
    spearman,
    t_interval,
    theil_sen,
)


def test_ranks_and_correlations_by_hand():
    assert S.average_ranks([10, 20, 20, 5]).tolist() == [2, 3.5, 3.5, 1]
    assert S.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6*2/(4*15)
    assert S.kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)  # (5 - 1) / 6
    assert math.isnan(S.spearman([1, 1, 1], [1, 2, 3])) and math.isnan(S.kendall_tau_b([1, 2, 3], [2, 2, 2]))
    reps = np.array([[1, 2, 3, 4], [4, 3, 2, 1], [1, 1, 1, 1]], dtype=float)
    sp = S.spearman(reps, [1, 2, 3, 4])
    assert sp[0] == pytest.approx(1) and sp[1] == pytest.approx(-1) and math.isnan(sp[2])
    kt = S.kendall_tau_b(reps, [1, 2, 3, 4])
    assert kt[0] == pytest.approx(1) and kt[1] == pytest.approx(-1) and math.isnan(kt[2])


def test_exact_permutation_p_countable():
    # 4 items in the observed order: only the identity reaches rho = 1 -> p = 1/24
    res = S.permutation_test([1, 2, 3, 4], [10, 20, 30, 40], S.spearman)
    assert res.exact and res.permutations == 24
    assert res.greater == pytest.approx(1 / 24) and res.two_sided == pytest.approx(2 / 24)
    # Kendall: tau = 1 only for the identity as well
    assert S.permutation_test([1, 2, 3], [3, 5, 9], S.kendall_tau_b).greater == pytest.approx(1 / 6)
    assert math.isnan(S.permutation_test([1, 2, 3], [1, 1, 1], S.spearman).greater)


def test_two_sided_is_scipys_twice_the_smaller_tail():
    # an asymmetric null: statistic = y[0]; observed 3 of [3, 1, 2] -> greater 1/3, less 3/3
    res = S.permutation_test([0, 0, 0], [3, 1, 2], lambda x, y: np.asarray(y)[..., 0])
    assert res.greater == pytest.approx(1 / 3) and res.two_sided == pytest.approx(2 / 3)
    ref = sps.permutation_test(([3.0, 1.0, 2.0],), lambda y, axis=-1: y[..., 0], vectorized=True,
                               permutation_type="pairings", alternative="two-sided")
    assert res.two_sided == pytest.approx(ref.pvalue)


def test_sampled_permutation_beyond_the_exact_limit():
    x = np.arange(12.0)
    res = S.permutation_test(x, x, S.spearman, permutations=500, seed=3)
    assert not res.exact and res.permutations == 500
    assert res.greater == pytest.approx(1 / 501)  # (1 + 0 hits) / (1 + 500)


def test_stratified_two_types_exact_p():
    # two strata of 3 rows, perfect order inside each: 3! * 3! = 36 within-stratum permutations;
    # the pooled within-type rho is 1 only when both are the identity -> p = 1/36
    strata = ["MHA"] * 3 + ["LN1"] * 3
    x = [0.5, 1.0, 1.5, 0.1, 0.2, 0.3]
    y = [0.01, 0.02, 0.03, 0.30, 0.40, 0.50]  # LN1 gains all larger: no size confound inside types
    res = S.stratified_permutation_test(x, y, strata)
    assert res.exact and res.permutations == 36 and res.strata == 2
    assert res.observed == pytest.approx(1) and res.greater == pytest.approx(1 / 36)
    assert res.two_sided == pytest.approx(2 / 36)
    per_stratum, _ = S.within_strata(x, y, strata)
    assert per_stratum == {"MHA": pytest.approx(1), "LN1": pytest.approx(1)}
    # per-stratum rho over 3! orders is 1, .5, .5, -.5, -.5, -1: pooled >= 0.75 needs (1, 1) or
    # (1, .5) / (.5, 1): 1 + 2 + 2 = 5 of 36
    y2 = [0.01, 0.02, 0.03, 0.30, 0.50, 0.40]  # LN1 order (1, 3, 2): rho 0.5
    res2 = S.stratified_permutation_test(x, y2, strata)
    assert res2.observed == pytest.approx(0.75) and res2.greater == pytest.approx(5 / 36)


def test_arms_of_one_dataset_are_permuted_together():
    """Two arms (optimisers) ranking the same 4 units of one dataset, in the same order: permuted
    independently they look like 8 units (p = 1/(4! 4!)); linked, one permutation of the 4 units serves
    both arms and p is that of 4 units, 1/4! (the units in another order in the second arm are matched
    by name). Units that differ between the arms fall back to permuting each arm alone."""
    units = ["MHA", "FC1", "LN1", "LN2"]
    x = [4.0, 3.0, 2.0, 1.0] * 2
    y = [0.4, 0.3, 0.2, 0.1, 0.5, 0.45, 0.3, 0.2]
    strata = ["sgd"] * 4 + ["adamw"] * 4
    alone = S.stratified_permutation_test(x, y, strata)
    assert alone.exact and alone.permutations == 576 and alone.greater == pytest.approx(1 / 576)
    linked = S.stratified_permutation_test(x, y, strata, units=units * 2, blocks=["d"] * 8)
    assert linked.exact and linked.permutations == 24 and linked.greater == pytest.approx(1 / 24)
    assert linked.strata == 2 and linked.observed == pytest.approx(1)
    swapped = [3, 2, 1, 0, 7, 6, 5, 4]  # the second arm's rows in reverse unit order: matched by name
    again = S.stratified_permutation_test(np.array(x)[swapped], np.array(y)[swapped], strata,
                                          units=list(np.array(units * 2)[swapped]), blocks=["d"] * 8)
    assert again.greater == pytest.approx(1 / 24)
    sampled = S.stratified_permutation_test(x, y, strata, units=units * 2, blocks=["d"] * 8,
                                            permutations=2000, seed=0)
    assert sampled.exact  # 24 orders: enumerated whatever --permutations says
    other = S.stratified_permutation_test(x, y, strata, units=units + ["MHA", "FC1", "LN1", "FC2"],
                                          blocks=["d"] * 8)
    assert other.permutations == 576
    # drawn permutations (9 units: 9! orders): two identical arms linked give one arm's p exactly
    rng = np.random.default_rng(5)
    x9, y9 = rng.random(9), rng.random(9)
    one = S.stratified_permutation_test(x9, y9, ["a"] * 9, permutations=400, seed=2)
    two = S.stratified_permutation_test(np.tile(x9, 2), np.tile(y9, 2), ["a"] * 9 + ["b"] * 9,
                                        permutations=400, seed=2, units=list(range(9)) * 2, blocks=[0] * 18)
    assert not one.exact and two.greater == pytest.approx(one.greater) and two.observed == pytest.approx(
        one.observed)


def test_stratified_ignores_between_type_differences():
    # inside each type y is unrelated to x (anti-ordered in one, ordered in the other: pooled 0),
    # while across types the big-x type has the big gains: the plain rho is high, the stratified one 0
    strata = ["A"] * 3 + ["B"] * 3
    x = [1, 2, 3, 11, 12, 13]
    y = [3, 2, 1, 11, 12, 13]
    assert S.spearman(x, y) > 0.7
    res = S.stratified_permutation_test(x, y, strata)
    assert res.observed == pytest.approx(0) and res.greater > 0.5


def test_stratified_sampled_and_errors():
    rng = np.random.default_rng(0)
    res = S.stratified_permutation_test(rng.random(20), rng.random(20), list("abcde") * 4,
                                        permutations=300, seed=1)
    assert not res.exact and res.permutations == 300 and 0 < res.greater <= 1
    with pytest.raises(ValueError, match="1-D of one length"):
        S.stratified_permutation_test([1, 2], [1, 2, 3], ["a", "a", "a"])


def test_partial_spearman():
    # z explains everything: x and y are both z's ranks plus independent wiggles -> partial ~ 0 or below
    z = np.array([1, 1, 1, 2, 2, 2, 3, 3, 3], dtype=float)
    x = z * 10 + np.array([1, 2, 3, 1, 2, 3, 1, 2, 3])
    y = z * 10 + np.array([3, 2, 1, 3, 2, 1, 3, 2, 1])
    assert S.spearman(x, y) > 0.5 and S.partial_spearman(x, y, z) < 0
    # formula by hand against the rank correlations
    rng = np.random.default_rng(2)
    a, b, c = rng.random(15), rng.random(15), rng.random(15)
    rab, rac, rbc = S.spearman(a, b), S.spearman(a, c), S.spearman(b, c)
    expect = (rab - rac * rbc) / math.sqrt((1 - rac**2) * (1 - rbc**2))
    assert S.partial_spearman(a, b, c) == pytest.approx(expect)
    # vectorised over replicates
    assert S.partial_spearman(np.stack([a, a]), b, c) == pytest.approx([expect, expect])
    # t-based one-sided p: r = 0 -> 0.5; decreasing in r
    assert S.partial_p_greater(0.0, 20) == pytest.approx(0.5)
    assert S.partial_p_greater(0.6, 20) < S.partial_p_greater(0.3, 20) < 0.5
    assert math.isnan(S.partial_p_greater(0.5, 3))


def test_t_interval_and_theil_sen():
    mean, lo, hi = S.t_interval([1.0, 2.0, 4.0])
    half = 4.302652729911275 * math.sqrt(7 / 3) / math.sqrt(3)  # t_{0.975, 2} * s / sqrt(n)
    assert mean == pytest.approx(7 / 3) and (lo, hi) == pytest.approx((7 / 3 - half, 7 / 3 + half))
    assert all(math.isnan(v) for v in S.t_interval([1.0])[1:])
    slope, intercept = S.theil_sen([0, 1, 2, 3, 4], [1, 3, 5, 7, 100])  # one outlier cannot tilt it
    assert slope == pytest.approx(2) and intercept == pytest.approx(1)
    assert all(math.isnan(v) for v in S.theil_sen([1, 1, 1], [1, 2, 3]))


def test_agrees_with_the_previous_hand_written_statistics():
    """The numbers the removed numpy-only claim_stats gave on these inputs (recorded from it): rho, tau-b,
    exact p (one-sided and |stat| >= |obs|, equal here: the null is symmetric), t interval and the
    Theil-Sen slope. The Theil-Sen intercept differs by definition: scipy's median(y) - slope *
    median(x), the old one median(y - slope * x)."""
    p = [0.62, 1.05, 0.93, 0.41, 0.55]  # five components' plasticity
    g = [0.010, 0.081, 0.064, 0.002, 0.020]  # their gains
    assert S.spearman(p, g) == pytest.approx(0.9) and S.kendall_tau_b(p, g) == pytest.approx(0.8)
    for fn in (S.spearman, S.kendall_tau_b):
        res = S.permutation_test(p, g, fn)
        assert res.exact and res.permutations == 120
        assert res.greater == pytest.approx(5 / 120) and res.two_sided == pytest.approx(10 / 120)
    assert S.t_interval(g) == pytest.approx((0.0354, -0.008036949053217994, 0.078836949053218), abs=1e-12)
    slope, intercept = S.theil_sen(p, g)
    assert slope == pytest.approx(0.12271874999999999)
    assert intercept == pytest.approx(float(np.median(g)) - slope * float(np.median(p)))


# -------------------------------------------------------------------------- ranks, p, intervals by hand
def test_average_ranks_share_tied_positions():
    assert average_ranks([10, 20, 20, 5]).tolist() == [2, 3.5, 3.5, 1]
    assert average_ranks([[3, 3, 3], [1, 2, 3]]).tolist() == [[2, 2, 2], [1, 2, 3]]


def test_spearman_by_hand_with_ties():
    # y ranks [1, 2, 3.5, 5, 3.5]: sum dx*dy = 8, sum dx^2 = 10, sum dy^2 = 9.5
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95), abs=1e-12)
    # ties in both: ranks [1.5, 1.5, 3, 4] and [1, 2.5, 2.5, 4]: 3.75 / 4.5
    assert spearman([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(3.75 / 4.5, abs=1e-12)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2, 3], [4, 4, 4]))
    rows = spearman(np.array([[1, 2, 3, 4], [1, 1, 2, 3]]), np.array([[5, 6, 7, 8], [1, 2, 2, 3]]))
    assert rows == pytest.approx([1.0, 3.75 / 4.5])


def test_kendall_tau_b_by_hand_with_ties():
    # 8 concordant, 1 discordant (4, 5), 1 pair tied in y: (8 - 1) / sqrt(10 * 9)
    assert kendall_tau_b([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(7 / math.sqrt(90), abs=1e-12)
    # one pair tied in x, another in y, 4 concordant: 4 / sqrt(5 * 5)
    assert kendall_tau_b([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8, abs=1e-12)
    assert kendall_tau_b([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(4 / 6, abs=1e-12)
    assert kendall_tau_b([4, 3, 2, 1], [1, 2, 3, 4]) == pytest.approx(-1.0)
    assert math.isnan(kendall_tau_b([2, 2, 2], [1, 2, 3]))


def test_permutation_p_values_by_enumeration():
    # n = 3, spearman over the 6 orders: 1, .5, .5, -.5, -.5, -1
    p = permutation_test([1, 2, 3], [1, 2, 3], spearman)
    assert p.exact and p.permutations == 6
    assert p.greater == pytest.approx(1 / 6) and p.two_sided == pytest.approx(2 / 6)
    # n = 4, tau = 2/3 (1 inversion); inversions of the 24 orders: 1, 3, 5, 6, 5, 3, 1 for 0..6
    p = permutation_test([1, 2, 3, 4], [1, 2, 4, 3], kendall_tau_b)
    assert p.greater == pytest.approx(4 / 24) and p.two_sided == pytest.approx(8 / 24)
    # a tie in y: the observed statistic counts itself and the orders that equal it
    p = permutation_test([1, 2, 3], [1, 2, 2], spearman)
    assert p.observed == pytest.approx(math.sqrt(3) / 2)
    assert p.greater == pytest.approx(2 / 6)  # identity and swapping the tied pair
    p = permutation_test([1, 2, 3], [5, 5, 5], spearman)
    assert math.isnan(p.greater)


def test_permutation_beyond_enumeration_draws_at_random():
    x = np.arange(9.0)
    p = permutation_test(x, x, spearman, permutations=999, seed=1)
    assert not p.exact and p.permutations == 999
    assert p.greater == pytest.approx(1 / 1000, abs=2 / 1000)  # 1/9! of the orders reach rho = 1
    q = permutation_test(x, x[::-1].copy(), spearman, permutations=999, seed=1)
    assert q.greater == pytest.approx(1.0)


def test_t_interval_and_percentiles():
    mean, lo, hi = t_interval([1.0, 2.0, 3.0])
    half = 4.302652730 / math.sqrt(3)
    assert (mean, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half), rel=1e-8)
    assert t_interval([0.4, 0.4]) == pytest.approx((0.4, 0.4, 0.4))
    m, lo, hi = t_interval([0.7])
    assert m == 0.7 and math.isnan(lo) and math.isnan(hi)
    assert percentile_interval(np.arange(101.0)) == pytest.approx((2.5, 97.5))
    assert percentile_interval([np.nan, 1.0, np.nan]) == (1.0, 1.0)
    assert all(math.isnan(v) for v in percentile_interval([np.nan]))
    counts = resample_counts(np.random.default_rng(0), 7, 50)
    assert counts.shape == (50, 7) and (counts.sum(1) == 7).all()


def test_theil_sen_by_hand_and_against_an_outlier():
    # slopes 1, 1, 10/3, 1, 4.5, 8 -> median (1 + 10/3) / 2; residual median of [0, -7/6, -7/3, 3.5]
    # scipy's intercept: median(y) - slope * median(x) = 1.5 - 13/6 * 1.5
    slope, icpt = theil_sen([0, 1, 2, 3], [0, 1, 2, 10])
    assert slope == pytest.approx(13 / 6) and icpt == pytest.approx(1.5 - 13 / 6 * 1.5)
    assert theil_sen([0, 1, 2, 3, 4], [0, 1, 2, 3, 100]) == pytest.approx((1.0, 0.0))
    assert all(math.isnan(v) for v in theil_sen([1, 1], [0, 5]))


def test_enumerated_permutations_match_itertools():
    # the exact null distribution is over all n! orders, each once
    x, y = np.array([0.3, 0.1, 0.7, 0.5]), np.array([2.0, 1.0, 4.0, 3.0])
    null = [spearman(x, y[list(p)]) for p in itertools.permutations(range(4))]
    obs = spearman(x, y)
    p = permutation_test(x, y, spearman)
    assert p.greater == pytest.approx(np.mean([v >= obs - 1e-12 for v in null]))


def test_the_analyses_tests_by_hand():
    x, y = [1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]
    reps = np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]])  # one replicate agrees, one reverses
    tests = S.rank_tests(x, y, np.array([x, x]), reps, permutations=100, seed=0)
    sp = tests["spearman"]
    assert sp.observed == pytest.approx(1) and sp.exact and sp.greater == pytest.approx(1 / 24)
    assert sp.interval == pytest.approx((-0.95, 0.95)) and sp.defined == 2
    assert tests["kendall"].observed == pytest.approx(1)
    assert S.rank_tests(x, y, permutations=100, seed=0)["spearman"].interval is None
    # association: the same tests of a criterion, and its partial Spearman with z held fixed
    z = [4.0, 1.0, 3.0, 2.0]
    assoc = S.association(x, y, reps, z, permutations=100, seed=0)
    assert assoc.spearman == pytest.approx(1) and assoc.kendall == pytest.approx(1)
    assert assoc.p_greater == pytest.approx(1 / 24) and assoc.interval == pytest.approx((-0.95, 0.95))
    assert assoc.partial == pytest.approx(S.partial_spearman(x, y, z))
    # within strata: each stratum ordered alike, the 3! x 3! within-stratum orders, one reaching it
    strata = np.array(list("aaabbb"))
    xs, ys = np.array([1.0, 2, 3, 1, 2, 3]), np.array([5.0, 6, 7, 1, 2, 3])
    within = S.within_association(xs, ys, strata, ys[None], np.ones(6), permutations=100, seed=0)
    assert within.spearman == pytest.approx(1) and within.p_greater == pytest.approx(1 / 36)
    assert within.kendall == pytest.approx(1) and within.interval == pytest.approx((1, 1))
    assert math.isnan(S.within_association(xs[:2], ys[:2], strata[:2], ys[None, :2], np.ones(2),
                                           permutations=10, seed=0).spearman)
    per = S.per_stratum_spearman(xs, -ys, xs[None], -ys[None], strata)
    assert per["a"].spearman == pytest.approx(-1) and per["b"].interval == pytest.approx((-1, -1))


def test_bounded_intervals_percentiles_and_quantiles():
    mean, lo, hi, clipped = S.bounded_t_interval([0.9, 1.0, 1.0], (0.0, 1.0))
    assert mean == pytest.approx(29 / 30) and hi == 1.0 and clipped == "high" and 0.0 < lo < mean
    mean, lo, hi, clipped = S.bounded_t_interval([0.5], (0.0, 1.0))
    assert mean == 0.5 and math.isnan(lo) and math.isnan(hi) and clipped is None
    assert quantile_summary(np.arange(11.0)) == {"min": 0.0, "p10": 1.0, "median": 5.0, "p90": 9.0,
                                                   "max": 10.0}
    assert all(math.isnan(v) for v in quantile_summary(np.array([])).values())


def test_holm_by_hand():
    from vitplast.claim.paired_tests import holm

    # sorted 0.01, 0.03, 0.04 of m = 3 (NaN not counted): 3 x 0.01, 2 x 0.03, then kept monotone
    out = holm([0.01, 0.04, 0.03, math.nan])
    assert out[:3] == pytest.approx([0.03, 0.06, 0.06]) and math.isnan(out[3])
