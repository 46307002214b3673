"""From plasticity chunks and finetuning summaries to a claim's table and rank correlations, for both
granularities: a claim ranks units (`.units.ClaimUnits`), whole components (``--granularity
component``) or (component, layer) pairs (``--granularity layer``: ``MHA@3`` is one component of one
layer, ``vitplast finetune --train MHA@3``: its parameters + the head).

Per unit ``u`` (trained alone, with the head) and learning rate ``lr``, ``acc[u, lr, s]`` is the final
validation accuracy of seed ``s``. Each unit keeps the learning rate of the grid with the best mean
accuracy over seeds (the same choice is made for the baseline); its **best-lr gain** (``best_lr_gain``)
is the paired difference, seed by seed, from the reference at that lr:

- ``baseline="head"`` (default, and always at layer granularity): the head-only run (linear probing)
  of the same seed — same head initialisation and data order, so the gain is what training the unit
  adds to training the head (every unit's run trains the head too);
- ``baseline="initial"``: the accuracy before finetuning (fresh head), which mostly measures how well
  the head learns and is kept for comparison.

A unit's plasticity is its component's over every layer, or its layer's (matched X-Y pairs before
finetuning, chunks resampled by the bootstrap). Baselines trained beside the components (``full``,
``lora``; ``head`` when the gain is measured from the initial accuracy) get the same accuracy and
gain, and no rank: they have no plasticity.

The numbers first (`vitplast.claim.samples.claim_samples`), the tests on them second
(`vitplast.claim.statistics`), the rows last (`_result`):

- accuracy and gain: Student-t 95% intervals across seeds;
- rank correlations (Spearman, Kendall tau-b) between plasticity and gain over all units, with a
  percentile bootstrap interval where every replicate resamples seeds (one multiset shared by all
  units and learning rates, the learning-rate choice made again) and pair chunks (one multiset shared
  by all components), and permutation p-values (units' gains shuffled against their plasticities);
  the same for the trainable-parameter count (the size-only rival);
- the partial Spearman of plasticity and gain with the trainable-parameter count held fixed;
- where some component type holds several units (a layer claim), the association **within** types,
  free of the size confound (every unit of a type has the same trainable size): a stratified
  permutation test permuting gains only among units of the same type, the per-type Spearman, and
  each criterion's within-type statistics (`vitplast.claim.statistics.within_association`); else
  each criterion's statistics over all units (`vitplast.claim.statistics.association`);
- MHA against each other component (paired over seeds) when MHA is a unit.

Which set of units each criterion would finetune under a budget, against random sets of the same
budget, is `.budgets`.
"""

from __future__ import annotations

import math

import numpy as np

from .paired_tests import paired_tests
from .records import (
    Bootstrap,
    ClaimAnalysis,
    Correlation,
    CriterionRow,
    Interval,
    MeasuredComponent,
    PairedTests,
    Partial,
    RankCorrelations,
    Ranking,
    RelativeGain,
    TrainRow,
    Trend,
    TypeSpearman,
    UnitRow,
    WithinType,
)
from .samples import Accuracy, Plasticity, claim_samples
from .statistics import (
    PermutationTest,
    bounded_t_interval,
    criterion_tests,
    partial_p_greater,
    partial_spearman,
    per_stratum_spearman,
    percentile_interval,
    rank_tests,
    stratified_permutation_test,
    theil_sen,
    too_few_to_resample,
)
from .units import ClaimUnits

LEVEL = 0.95
RELATIVE_GAIN = ("(acc - acc_LP) / acc_LP; acc: the best over learning rates of the mean test accuracy over "
                 "seeds; acc_LP: the head-only run's (linear probing), as the paper computes it")
VALIDATED = "the same with each lr chosen on a validation split held out from the training data"
NO_HOLDOUT = "(not available: the runs hold no held-out validation accuracy)"
ACC, GAIN = (0.0, 1.0), (-1.0, 1.0)  # what an accuracy and a gain can be
REFERENCE = "MHA"  # the component the paired tests compare with each other one


def analyse(measured: dict, summaries: list, *, units: ClaimUnits, lrs: list[float], seeds: list[int],
            baseline: str = "head", extra: tuple[str, ...] | list[str] = (), bootstrap: int = 2000,
            permutations: int = 10000, seed: int = 0, criteria: dict | None = None) -> ClaimAnalysis:
    """The claim's result over ``units``: per-unit rows, correlations, their bootstrap and permutation
    tests; ``summaries``: the runs' `vitplast.runs.summary.RunSummary` (or their fields); ``extra``:
    baselines trained beside the units (full, lora; head when it is not the gain's reference),
    reported with their accuracy and gain, not ranked. ``criteria``: ``{name: {unit name: score}}`` of
    the criteria, each correlated with the gains as plasticity is (plasticity's scores come from this
    measurement unless given). The numbers first (the arrays, the tests), the records last; the
    budgets are `.budgets`' (``budgets`` None here)."""
    names, n = list(units.names), len(units)
    trains = names + list(extra) + (["head"] if baseline == "head" else [])
    samples = claim_samples(measured, summaries, trains=trains, ranked=n, lrs=lrs, seeds=seeds,
                            baseline=baseline, bootstrap=bootstrap, seed=seed)
    acc, plast = samples.accuracy, samples.plasticity
    p_value, p_reps = plast.of_units(units.components, units.layers)  # (U,), (B, U)
    gain, g_reps = acc.gains_seed[:n].mean(-1), acc.gain_reps  # (U,), (B, U)
    sizes = np.array([acc.params[u] for u in names], dtype=np.float64)
    # some type holds several units: compare within types
    types = np.array(units.components) if len(set(units.components)) < n else None
    scored = {"plasticity": dict(zip(names, p_value.tolist(), strict=True)), **(criteria or {})}
    # the tests (`.statistics`), then the records
    withheld = too_few_to_resample(seeds=samples.seeds, pair_chunks=samples.pair_chunks)
    chunks_withheld = too_few_to_resample(pair_chunks=samples.pair_chunks)
    correlations = rank_tests(p_value, gain, p_reps, g_reps, permutations=permutations, seed=seed,
                              level=LEVEL)
    by_size = rank_tests(sizes, gain, permutations=permutations, seed=seed)
    accuracy = [bounded_t_interval(v, ACC, LEVEL) for v in acc.per_seed]
    gains = [bounded_t_interval(v, GAIN, LEVEL) for v in acc.gains_seed]
    initial = bounded_t_interval(acc.initial, ACC, LEVEL)
    tests, counts = criterion_tests(scored, names, gain, g_reps, sizes, types, permutations=permutations,
                                    seed=seed, level=LEVEL)
    partial = float(partial_spearman(p_value, gain, sizes))
    partial_p = partial_p_greater(partial, n)
    partial_ci = percentile_interval(partial_spearman(p_reps, g_reps, np.broadcast_to(sizes, p_reps.shape)),
                                     LEVEL)  # over the (B,) replicates
    unit_ci = [percentile_interval(r, LEVEL) for r in p_reps.T]
    component_ci = [(percentile_interval(plast.overall_reps[:, i], LEVEL),
                     [percentile_interval(r, LEVEL) for r in per_layer])
                    for i, per_layer in enumerate(plast.per_layer_reps.transpose(1, 2, 0))]  # (C, L, B)
    slope, intercept = theil_sen(p_value, gain)
    strata = None if types is None else (
        stratified_permutation_test(p_value, gain, types, permutations=permutations, seed=seed),
        per_stratum_spearman(p_value, gain, p_reps, g_reps, types, LEVEL))
    mha = (paired_tests(REFERENCE, {c: acc.per_seed[i].tolist() for i, c in enumerate(names)})
           if REFERENCE in names and n >= 2 else None)
    measured_components = _plasticity_records(plast, component_ci, chunks_withheld)
    rows = [UnitRow(**_unit_columns(i, u, c, li, plast, measured_components, p_value),
                    plasticity_ci=bootstrap_ci(unit_ci[i], chunks_withheld),
                    **accuracy_columns(acc, i, accuracy, lrs), **gain_columns(acc, i, gains))
            for i, (u, c, li) in enumerate(zip(names, units.components, units.layers, strict=True))]
    head = accuracy_columns(acc, len(acc.trains) - 1, accuracy, lrs) if baseline == "head" else {}
    base = TrainRow(baseline, initial_accuracy=_interval(initial, acc.initial.size), **head)
    ranks = RankCorrelations(**{k: correlation(r, withheld) for k, r in correlations.items()})
    return ClaimAnalysis(
        granularity=units.granularity, rows=rows, baseline=base,
        baselines=[TrainRow(b, **accuracy_columns(acc, t, accuracy, lrs), **gain_columns(acc, t, gains))
                   for t, b in enumerate(extra, start=n)],
        correlations=ranks,
        params_correlations=RankCorrelations(**{k: correlation(r, "no bootstrap of the sizes")
                                                for k, r in by_size.items()}),
        partial=Partial(finite(partial), bootstrap_ci(partial_ci, withheld), finite(partial_p),
                        "trainable parameters"),
        within_type=None if strata is None else _within_type(*strata, types, sizes, withheld),
        trend=Trend("theil-sen", finite(slope), finite(intercept)),
        ranking=Ranking([names[i] for i in np.argsort(-p_value, kind="stable")],
                        [names[i] for i in np.argsort(-gain, kind="stable")]),
        layers=list(plast.layers),
        other_measured={c: v for c, v in measured_components.items() if c not in units.components},
        lr_edges=[r.unit for r in rows if r.lr_edge] + (["head"] if base.lr_edge else []),
        bootstrap=Bootstrap(bootstrap, samples.seeds, samples.pair_chunks, int(measured["pairs"]), LEVEL,
                            withheld),
        criteria=criteria_rows(tests, counts, withheld, units.granularity),
        verdict=verdict(ranks.spearman, n, f"{units.noun}s",
                        [f"{r.unit} ({r.lr_edge})" for r in rows if r.lr_edge]),
        relative_gain=RelativeGain(RELATIVE_GAIN, VALIDATED if acc.holdout else f"{VALIDATED} {NO_HOLDOUT}"),
        mha_tests=None if mha is None else PairedTests.from_json(finite(mha), "claim.json",
                                                                 "analysis.mha_tests"))


def finite(x):
    """``x`` with every non-finite float made None (NaN: undefined; strict JSON), through dicts, lists
    and tuples; None stays None."""
    if isinstance(x, float):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def _interval(interval: tuple, n: int) -> Interval:
    """A `vitplast.claim.statistics.bounded_t_interval` over ``n`` seeds as the result records it."""
    mean, lo, hi, clipped = interval
    return Interval(mean, [finite(lo), finite(hi)], n, "student-t", clipped)


def bootstrap_ci(interval, withheld: str | None) -> list:
    """A percentile interval as the result writes it; none (``[None, None]``) when ``withheld`` says
    why or there are no replicates (``interval`` None)."""
    return [None, None] if interval is None or withheld else [finite(v) for v in interval]


def correlation(r: PermutationTest, withheld: str | None) -> Correlation:
    """A rank statistic's record: its value, bootstrap interval (none when ``withheld``) and
    permutation p-values."""
    return Correlation(finite(r.observed), bootstrap_ci(r.interval, withheld), finite(r.greater),
                       finite(r.two_sided), r.permutations, r.exact, r.defined)


def accuracy_columns(acc: Accuracy, t: int, accuracy: list, lrs: list[float]) -> dict:
    """Train ``t``'s best lr (``lr_edge``: at the grid's edge?), its trainable parameters, its accuracy
    at that lr with its interval over the seeds (``accuracy``: every train's), seed by seed, and its
    mean accuracy at each lr."""
    return dict(lr=float(lrs[acc.best_idx[t]]), lr_edge=acc.lr_edges[t],
                trainable_params=acc.params[acc.trains[t]],
                accuracy=_interval(accuracy[t], acc.per_seed.shape[1]),
                accuracy_per_seed=acc.per_seed[t].tolist(), accuracy_by_lr=acc.by_lr[t])


def gain_columns(acc: Accuracy, t: int, gains: list) -> dict:
    """Train ``t``'s best-lr gain over the reference, with its interval over the seeds (``gains``:
    every train's), seed by seed, and the paper's relative gains."""
    return dict(best_lr_gain=_interval(gains[t], acc.gains_seed.shape[1]),
                best_lr_gain_per_seed=acc.gains_seed[t].tolist(),
                relative_gain=finite(float(acc.relative_gain[t])),
                relative_gain_validated=finite(float(acc.relative_gain_validated[t])))


def _plasticity_records(plast: Plasticity, intervals: list, withheld: str | None
                        ) -> dict[str, MeasuredComponent]:
    """Every measured component's plasticity over all layers with its bootstrap intervals (none from
    fewer than 5 chunks), per layer, and its pairs (``intervals``: each component's percentile
    intervals, over all layers and per layer)."""
    return {c: MeasuredComponent(finite(float(plast.overall[i])), bootstrap_ci(overall, withheld),
                                 [finite(float(v)) for v in plast.per_layer[i]],
                                 [bootstrap_ci(v, withheld) for v in per_layer],
                                 int(plast.pairs[i]), int(plast.excluded[i]))
            for i, (c, (overall, per_layer)) in enumerate(zip(plast.components, intervals, strict=True))}


def _unit_columns(i: int, name: str, c: str, li: int | None, plast: Plasticity,
                  measured: dict[str, MeasuredComponent], p_value: np.ndarray) -> dict:
    """Unit ``i``'s plasticity columns: a whole component's over all layers (and per layer), or one
    layer's; its pairs (the fewest of a layer) and the pairs left out."""
    whole, m, ci = li is None, measured[c], plast.components.index(c)
    return dict(unit=name, component=c, layer=None if whole else plast.layers[li], layer_index=li,
                plasticity=finite(float(p_value[i])),
                plasticity_per_layer=m.per_layer if whole else None,
                plasticity_per_layer_ci=m.per_layer_ci if whole else None,
                pairs=m.pairs if whole else int(plast.layer_pairs[ci, li]),
                excluded_pairs=m.excluded if whole else int(plast.layer_excluded[ci, li]))


def _within_type(strat: PermutationTest, per_type: dict, types: np.ndarray, sizes: np.ndarray,
                 withheld: str | None) -> WithinType:
    """The stratified permutation test (gains permuted among units of one component type) and the
    per-type Spearman."""
    return WithinType(finite(strat.greater), finite(strat.two_sided), finite(strat.observed), strat.exact,
                      strat.permutations,
                      {c: TypeSpearman(finite(v.spearman), bootstrap_ci(v.interval, withheld),
                                       int((types == c).sum()), int(sizes[types == c][0]))
                       for c, v in per_type.items()})


def criteria_rows(tests: dict, counts: dict, withheld: str | None, granularity: str = "component"
                  ) -> list[CriterionRow]:
    """One row per criterion (``counts``: ``{name: units where its score and the gain are defined}``;
    ``tests``: the `vitplast.claim.statistics.Association` of those with at least 3): its Spearman
    with the bootstrap interval over seeds (none when ``withheld``), Kendall's tau-b, the one-sided
    permutation p of Spearman (H1: rho > 0) and the partial Spearman with the trainable-parameter count
    held fixed (null for ``size``, which is that count)."""
    rows = []
    for name, n in counts.items():
        t = tests.get(name)
        if t is None or not math.isfinite(t.spearman):
            rows.append(CriterionRow(name, granularity, n, None, [None, None], None, None, None))
        else:
            rows.append(CriterionRow(name, granularity, n, finite(t.spearman),
                                     bootstrap_ci(t.interval, withheld), finite(t.kendall),
                                     finite(t.p_greater), None if name == "size" else finite(t.partial)))
    return rows


def verdict(spearman: Correlation, n: int, noun: str = "components", unbracketed: list[str] = ()) -> str:
    """One sentence on what the Spearman correlation, its interval and its p-value support; withheld
    ("not bracketed") while a ranked unit's best lr sits at an edge of the grid it was run at
    (``unbracketed``: those units with the edge), since its gain may be clipped there."""
    rho, (lo, hi), p = spearman.value, spearman.ci, spearman.p_greater
    if unbracketed:
        return (f"not bracketed: the best lr of {', '.join(unbracketed)} is at an edge of the grid it was "
                "run at, so the gain may be clipped; no verdict until every best lr is interior (widen --lr, "
                f"or --lr auto); rho = {'n/a' if rho is None else f'{rho:+.2f}'}")
    if rho is None or p is None:
        return f"undefined: plasticity or accuracy gain is constant across the {noun}"
    floor = 1 / math.factorial(n) if n <= 8 else None
    floor_text = f" (with {n} {noun} the smallest possible p is {floor:.3g})" if floor else ""
    if lo is None or hi is None:  # no bootstrap interval (too few seeds or chunks): the permutation test
        how = "supported" if p < 0.05 and rho > 0 else "not established"
        return (f"{how}: rho = {rho:+.2f}, one-sided permutation p = {p:.3g}{floor_text}; no bootstrap "
                "interval")
    if p < 0.05 and lo > 0:
        return (f"supported: rho = {rho:+.2f} > 0, bootstrap CI [{lo:+.2f}, {hi:+.2f}] excludes 0, "
                f"one-sided permutation p = {p:.3g}")
    if hi < 0:
        return (f"contradicted: rho = {rho:+.2f}, bootstrap CI [{lo:+.2f}, {hi:+.2f}] lies below 0 "
                f"(one-sided p = {p:.3g}){floor_text}")
    return (f"not established: rho = {rho:+.2f}, bootstrap CI [{lo:+.2f}, {hi:+.2f}], one-sided "
            f"permutation p = {p:.3g}{floor_text}")
