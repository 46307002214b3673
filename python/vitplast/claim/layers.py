"""`vitplast claim --granularity layer`: every (component, layer) unit trained alone, and the
statistics that can separate plasticity from size.

A unit ``MHA@3`` is one component of one layer (``vitplast finetune --train MHA@3``: its parameters +
the head). Its plasticity is that layer's (matched X-Y pairs before finetuning, chunks resampled by
the bootstrap); its gain the paired difference from the head-only run of the same seed at each
train's best learning rate, as in `.analysis`. Inside a component type every unit has the same
trainable size, so the association **within** types is free of the size confound:

- rank correlations over all units (Spearman, Kendall tau-b) with the joint bootstrap and sampled
  permutation p-values, and the same for the trainable-parameter count (the size-only rival);
- a stratified permutation test permuting gains only among units of the same component type (the
  pooled within-type Spearman), and the per-type Spearman;
- the partial Spearman of plasticity and gain with the trainable-parameter count held fixed;
- the same within-type statistics for every criterion of ``--criteria``
  (`vitplast.claim.statistics.within_association`).

Which set of units each criterion would finetune under a parameter budget, against random sets of the
same budget, is `.budgets` (shared with the component claim).
"""

from __future__ import annotations

import math

import numpy as np

from .analysis import (
    ACC,
    GAIN,
    LEVEL,
    accuracy_columns,
    bootstrap_ci,
    criteria_rows,
    finite,
    gain_columns,
    interval_record,
)
from .samples import claim_samples
from .statistics import (
    bounded_t_interval,
    partial_p_greater,
    partial_spearman,
    per_stratum_spearman,
    percentile_interval,
    rank_tests,
    stratified_permutation_test,
    theil_sen,
    too_few_to_resample,
    within_association,
)


def units_of(measured: dict, components: list[str]) -> list[tuple[str, int]]:
    """``(component, layer index)`` of every measured unit of ``components``, component-major."""
    missing = [c for c in components if c not in measured["components"]]
    if missing:
        raise ValueError(f"components {missing} were not measured (measured: {measured['components']})")
    return [(c, li) for c in components for li in range(len(measured["layers"]))]


def unit_name(unit: tuple[str, int]) -> str:
    return f"{unit[0]}@{unit[1]}"


def analyse_layers(measured: dict, summaries: list[dict], *, units: list[tuple[str, int]],
                   lrs: list[float], seeds: list[int], bootstrap: int = 2000, permutations: int = 10000,
                   seed: int = 0, criteria: dict | None = None) -> dict:
    """The layer-granularity result: per-unit rows and the statistics above; ``criteria``: ``{name:
    {unit name: score}}`` (plasticity's included), each compared with the gains within types.

    In three steps, as `vitplast.claim.analysis.analyse`: the arrays
    (`vitplast.claim.samples.claim_samples`), the tests on them (`vitplast.claim.statistics`), the
    rows of the result (`_result`)."""
    names = [unit_name(u) for u in units]
    samples = claim_samples(measured, summaries, trains=names + ["head"], ranked=len(units), lrs=lrs,
                            seeds=seeds, baseline="head", bootstrap=bootstrap, seed=seed)
    acc, plast = samples.accuracy, samples.plasticity
    rows = ([plast.components.index(c) for c, _ in units], [li for _, li in units])
    p_value, p_reps = plast.per_layer[rows], plast.per_layer_reps[:, rows[0], rows[1]]  # (U,), (B, U)
    gain, g_reps = acc.gains_seed[: len(units)].mean(-1), acc.gain_reps  # (U,), (B, U)
    sizes = np.array([acc.params[n] for n in names], dtype=np.float64)
    types = np.array([c for c, _ in units])
    scores = {name: np.array([math.nan if per_unit.get(u) is None else per_unit[u] for u in names],
                             dtype=np.float64) for name, per_unit in (criteria or {}).items()}
    defined = {name: np.isfinite(x) & np.isfinite(gain) for name, x in scores.items()}

    partial = float(partial_spearman(p_value, gain, sizes))
    partial_reps = partial_spearman(p_reps, g_reps, np.broadcast_to(sizes, p_reps.shape))  # (B,)
    tests = {
        "withheld": too_few_to_resample(seeds=samples.seeds, pair_chunks=samples.pair_chunks),
        "chunks_withheld": too_few_to_resample(pair_chunks=samples.pair_chunks),
        "correlations": rank_tests(p_value, gain, p_reps, g_reps, permutations=permutations, seed=seed,
                                   level=LEVEL),
        "by_size": rank_tests(sizes, gain, permutations=permutations, seed=seed),
        "stratified": stratified_permutation_test(p_value, gain, types, permutations=permutations, seed=seed),
        "per_type": per_stratum_spearman(p_value, gain, p_reps, g_reps, types, LEVEL),
        "partial": partial, "partial_p": partial_p_greater(partial, len(units)),
        "partial_ci": percentile_interval(partial_reps, LEVEL),
        "plasticity_ci": [percentile_interval(r, LEVEL) for r in p_reps.T],
        "trend": theil_sen(p_value, gain),
        "accuracy": [bounded_t_interval(v, ACC, LEVEL) for v in acc.per_seed],
        "gain": [bounded_t_interval(v, GAIN, LEVEL) for v in acc.gains_seed],
        "initial": bounded_t_interval(acc.initial, ACC, LEVEL),
        "criteria": {name: within_association(x[ok], gain[ok], types[ok], g_reps[:, ok], sizes[ok],
                                              permutations=permutations, seed=seed, level=LEVEL)
                     for (name, x), ok in zip(scores.items(), defined.values(), strict=True)},
    }
    bootstrap = {"replicates": bootstrap, "seeds": samples.seeds, "pair_chunks": samples.pair_chunks,
                 "pairs": int(measured["pairs"]), "level": LEVEL, "withheld": tests["withheld"]}
    return _result(samples, tests, units=units, names=names, types=types, sizes=sizes, lrs=lrs,
                   counts={k: int(v.sum()) for k, v in defined.items()}, bootstrap=bootstrap)


def _result(samples, tests: dict, *, units, names, types, sizes, lrs, counts, bootstrap) -> dict:
    """The result's rows and records from the arrays and the tests."""
    acc, withheld = samples.accuracy, tests["withheld"]
    rows = [{"unit": names[i], "component": c, "layer": samples.plasticity.layers[li], "layer_index": li,
             "plasticity": finite(samples.plasticity.per_layer[samples.plasticity.components.index(c), li]),
             "plasticity_ci": bootstrap_ci(tests["plasticity_ci"][i], tests["chunks_withheld"]),
             **accuracy_columns(acc, i, tests, lrs), **gain_columns(acc, i, tests),
             "accuracy_by_lr": acc.by_lr[i]} for i, (c, li) in enumerate(units)]
    head = len(acc.trains) - 1
    base = {"train": "head", **accuracy_columns(acc, head, tests, lrs),
            "initial_accuracy": interval_record(tests["initial"], acc.initial.size)}
    strat, per_type = tests["stratified"], tests["per_type"]
    correlations = {name: {"value": finite(r["observed"]), "p_greater": finite(r["greater"]),
                           "p_two_sided": finite(r["two_sided"]), "permutations": r["permutations"],
                           "exact": r["exact"], "ci": bootstrap_ci(r["interval"], withheld)}
                    for name, r in tests["correlations"].items()}
    slope, intercept = tests["trend"]
    return {
        "granularity": "layer", "rows": rows, "baseline": base, "correlations": correlations,
        "params_correlations": {name: {"value": finite(r["observed"]), "p_greater": finite(r["greater"]),
                                       "p_two_sided": finite(r["two_sided"]),
                                       "permutations": r["permutations"], "exact": r["exact"],
                                       "ci": [None, None]}
                                for name, r in tests["by_size"].items()},
        "within_type": {"stratified_p_greater": finite(strat["greater"]),
                        "stratified_p_two_sided": finite(strat["two_sided"]),
                        "pooled_spearman": finite(strat["observed"]), "exact": strat["exact"],
                        "permutations": strat["permutations"],
                        "per_type": {c: {"spearman": finite(v["spearman"]),
                                         "ci": bootstrap_ci(v["interval"], withheld),
                                         "units": int((types == c).sum()),
                                         "trainable_params": int(sizes[types == c][0])}
                                     for c, v in per_type.items()}},
        "partial": {"spearman": finite(tests["partial"]), "ci": bootstrap_ci(tests["partial_ci"], withheld),
                    "p_greater": finite(tests["partial_p"]), "controls": "trainable parameters"},
        "trend": {"method": "theil-sen", "slope": finite(slope), "intercept": finite(intercept)},
        "criteria": criteria_rows(tests["criteria"], counts, withheld, granularity="layer"),
        "layers": list(samples.plasticity.layers),
        "lr_edges": [r["unit"] for r in rows if r["lr_edge"]] + (["head"] if base["lr_edge"] else []),
        "bootstrap": bootstrap,
    }
