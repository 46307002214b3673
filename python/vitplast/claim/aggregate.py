"""The claim over several arms (datasets, or one dataset trained with several optimisers, or both):
each arm's own analysis (its rank correlations, as one claim reports them), then what they say
together. The arms are the strata below (called datasets, as in the files).

- per dataset: Spearman's rho and Kendall's tau-b between plasticity and gain, their bootstrap
  intervals and one-sided permutation p-values (from that dataset's analysis);
- pooled: the within-dataset Spearman, each dataset's rho weighted by its number of components (or
  units), tested by a **stratified** permutation test that permutes the gains only among the rows of
  the same dataset (`vitplast.claim.statistics.stratified_permutation_test`: what differs
  between datasets, their accuracy level, cannot make p small); the arms of one dataset (its
  optimisers) rank the same units, so one permutation of its units serves all of them: a component
  ranked under two optimisers is one unit measured twice, not two;
- combined: the per-dataset one-sided p-values combined by Stouffer's method weighted by the square
  root of each dataset's number of rows (``scipy.stats.combine_pvalues``), and how many datasets
  have rho > 0;
- a figure with one panel per dataset: gain against plasticity, with the rho of each
  (`vitplast.claim.figure.aggregate_figure`).

The datasets' analyses are read as typed records (`.records.ClaimAnalysis`); the aggregate is one too
(`Aggregate`, what aggregate.json holds under ``aggregate``).

Rows whose plasticity or gain is undefined are left out of the pooled test (and counted).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats

from .analysis import REFERENCE, finite
from .paired_tests import paired_tests
from .records import ClaimAnalysis, Correlation, PairedTests, Record, encode
from .report import mha_test_lines, num
from .statistics import PermutationTest, stratified_permutation_test


class Point(Record):
    """One ranked unit of one dataset: its plasticity and best-lr gain with their intervals."""

    name: str
    component: str
    plasticity: float | None
    plasticity_ci: list
    best_lr_gain: float | None
    best_lr_gain_ci: list


class DatasetRanks(Record):
    """One dataset's rank correlations (from its own analysis) and its points."""

    data: str
    rows: int
    spearman: Correlation  # its value, interval and one-sided p
    kendall: Correlation
    ranking: dict
    points: list[Point]
    optimizer: str | None = None  # what its runs trained with (None: not recorded in the file)
    unbracketed: list[str] | None = None  # its units whose best lr sits at an edge of the grid


class Pooled(Record):
    spearman: float | None
    p_greater: float | None
    p_two_sided: float | None
    left_out: int
    exact: bool | None = None
    permutations: int | None = None
    strata: int | None = None


class Combined(Record):
    datasets_rho_positive: int
    datasets_rho_defined: int
    method: str
    p_greater: float | None


class Aggregate(Record):
    """The claim over several datasets."""

    datasets: dict[str, DatasetRanks]
    pooled: Pooled
    combined: Combined
    mha_tests: PairedTests | None


def _points(an: ClaimAnalysis) -> list[Point]:
    return [Point(r.unit, r.component, r.plasticity, r.plasticity_ci, r.best_lr_gain.mean, r.best_lr_gain.ci)
            for r in an.rows]


def _rank(c: Correlation) -> Correlation:
    return Correlation(c.value, c.ci, c.p_greater)


class Arm(NamedTuple):
    """One arm of a claim: its analysis, the data it ran on (its ``--data``) and its optimiser (None:
    not recorded)."""

    analysis: ClaimAnalysis
    data: str
    optimizer: str | None = None


def aggregate_claims(arms: dict[str, Arm], *, permutations: int = 10000, seed: int = 0) -> Aggregate:
    """The aggregate of the arms' analyses (``{name: arm}``): per-arm correlations, the pooled
    stratified test, the combined p-value."""
    analyses = {name: arm.analysis for name, arm in arms.items()}
    per = {name: DatasetRanks(arms[name].data, len(an.rows), _rank(an.correlations.spearman),
                              _rank(an.correlations.kendall), encode(an.ranking), _points(an),
                              arms[name].optimizer,
                              [u for u in an.lr_edges if u in {r.unit for r in an.rows}])
           for name, an in analyses.items()}
    kept = [(name, p) for name, d in per.items() for p in d.points
            if p.plasticity is not None and p.best_lr_gain is not None]
    left_out = sum(len(d.points) for d in per.values()) - len(kept)
    # the arms of one dataset rank the same units: one permutation of them serves all its arms
    pooled = (stratified_permutation_test(np.array([p.plasticity for _, p in kept]),
                                          np.array([p.best_lr_gain for _, p in kept]),
                                          np.array([name for name, _ in kept]), permutations=permutations,
                                          seed=seed, units=[p.name for _, p in kept],
                                          blocks=[per[name].data for name, _ in kept])
              if kept else None)
    return Aggregate(per, _pooled(pooled, left_out), _combined(per), _mha_tests(analyses))


def _mha_tests(analyses: dict[str, ClaimAnalysis]) -> PairedTests | None:
    """MHA against each other component over the (dataset, seed) pairs of the component claims: each
    component's accuracy at its best lr, paired by dataset and seed (`paired_tests`, Holm-corrected)."""
    pairs: dict[str, list[float]] = {}
    for an in analyses.values():
        if an.mha_tests is None:  # MHA is not a unit of this claim
            return None
        for r in an.rows:
            pairs.setdefault(r.unit, []).extend(r.accuracy_per_seed)
    if REFERENCE not in pairs or len({len(v) for v in pairs.values()}) != 1:
        return None
    return PairedTests.from_json(finite(paired_tests(REFERENCE, pairs)), "aggregate", "mha_tests")


def _pooled(test: PermutationTest | None, left_out: int) -> Pooled:
    if test is None:
        return Pooled(None, None, None, left_out)
    return Pooled(finite(test.observed), finite(test.greater), finite(test.two_sided), left_out, test.exact,
                  test.permutations, test.strata)


def _combined(per: dict[str, DatasetRanks]) -> Combined:
    """Stouffer's combination of the datasets' one-sided p-values (weights sqrt(rows))."""
    ps = [(d.spearman.p_greater, d.rows) for d in per.values() if d.spearman.p_greater is not None]
    rhos = [d.spearman.value for d in per.values() if d.spearman.value is not None]
    p = None
    if ps:
        clipped = np.clip([v for v, _ in ps], 1e-300, 1 - 1e-12)  # Stouffer needs 0 < p < 1
        res = stats.combine_pvalues(clipped, method="stouffer", weights=np.sqrt([n for _, n in ps]))
        p = finite(float(res.pvalue))
    return Combined(sum(r > 0 for r in rhos), len(rhos), "stouffer", p)


def shared_units_note(agg: Aggregate) -> str | None:
    """What the pooled and combined tests mean when several arms share a dataset (None when none do)."""
    shared = sorted({d.data for d in agg.datasets.values()
                     if sum(o.data == d.data for o in agg.datasets.values()) > 1})
    if not shared:
        return None
    return (f"the arms of {', '.join(shared)} rank the same units under each optimiser: the pooled test "
            "permutes those units once for all of them, so a unit counts once; Stouffer's combination "
            "treats the arms' p-values as independent, which they are not")


def strata_noun(agg: Aggregate) -> str:
    """What the aggregate's strata are called: ``datasets``, or ``arms`` when their optimisers differ."""
    return "arms" if len({d.optimizer for d in agg.datasets.values()}) > 1 else "datasets"


def aggregate_verdict(agg: Aggregate) -> str:
    """One sentence on what the arms together support; withheld ("not bracketed") while a ranked unit's
    best lr sits at an edge of its arm's grid."""
    rho, p, noun = agg.pooled.spearman, agg.pooled.p_greater, strata_noun(agg)
    pos = f"rho > 0 on {agg.combined.datasets_rho_positive} of {len(agg.datasets)} {noun}"
    edges = [f"{name}: {', '.join(d.unbracketed)}" for name, d in agg.datasets.items() if d.unbracketed]
    if edges:
        return (f"not bracketed: a best lr is at an edge of the grid it was run at ({'; '.join(edges)}); no "
                "verdict until every best lr is interior")
    if rho is None or p is None:
        return f"undefined: plasticity or gain is constant within every one of the {noun} ({pos})"
    how = "supported" if p < 0.05 and rho > 0 else "not established"
    return f"{how} across {noun}: pooled rho within {noun} = {rho:+.2f}, stratified p = {p:.3g}; {pos}"


def format_aggregate(agg: Aggregate) -> str:
    """The aggregate as plain text: one line per dataset, then the pooled and combined tests."""
    n, noun = len(agg.datasets), strata_noun(agg)
    arms = f"{n} arms (dataset x optimiser)" if noun == "arms" else f"{n} datasets"
    lines = [f"Does plasticity before finetuning predict the accuracy gain, across {arms}?", "",
             f"{'dataset':<24} {'data':<20} {'optimizer':<9} {'rows':>4}  {'Spearman rho [95% CI]':<24} "
             f"{'p':>8}  {'Kendall tau-b':>13}"]
    lines.append("-" * len(lines[-1]))
    for name, d in agg.datasets.items():
        sp = d.spearman
        rho = f"{num(sp.value, '+.3f')} [{num(sp.ci[0], '+.2f')}, {num(sp.ci[1], '+.2f')}]"
        lines.append(f"{name:<24} {d.data:<20} {d.optimizer or '':<9} {d.rows:>4}  {rho:<24} "
                     f"{num(sp.p_greater, '.3g'):>8}  {num(d.kendall.value, '+.3f'):>13}")
    pooled, comb = agg.pooled, agg.combined
    kind = ("exact" if pooled.exact else f"{pooled.permutations} random permutations"
            if pooled.exact is False else "undefined")
    lines += [
        "",
        f"pooled within {noun}: Spearman {num(pooled.spearman, '+.3f')}, stratified permutation "
        f"p = {num(pooled.p_greater, '.3g')} (one-sided), {num(pooled.p_two_sided, '.3g')} "
        f"(two-sided; gains permuted within each of the {noun}, {kind})",
        f"combined p of the {noun} (Stouffer, weights sqrt(rows)): {num(comb.p_greater, '.3g')}; rho > 0 "
        f"on {comb.datasets_rho_positive} of {comb.datasets_rho_defined} {noun} where it is defined",
    ]
    if note := shared_units_note(agg):
        lines.append(f"({note})")
    if pooled.left_out:
        lines.append(f"({pooled.left_out} rows with an undefined plasticity or gain left out of the pooled "
                     "test)")
    lines += mha_test_lines(agg.mha_tests)
    lines.append(f"verdict: {aggregate_verdict(agg)}")
    return "\n".join(lines)
