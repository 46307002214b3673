"""From plasticity chunks and finetuning summaries to the claim's table and rank correlations.

Per component ``c`` (trained alone, with the head) and learning rate ``lr``, ``acc[c, lr, s]`` is the
final validation accuracy of seed ``s``. Each component keeps the learning rate of the grid with the
best mean accuracy over seeds (the same choice is made for the baseline); its **gain** is the paired
difference, seed by seed, from the baseline:

- ``baseline="head"`` (default): the head-only run (linear probing) of the same seed — same head
  initialisation and data order, so the gain is what training the component adds to training the
  head (every component run trains the head too);
- ``baseline="initial"``: the accuracy before finetuning (fresh head), which mostly measures how well
  the head learns and is kept for comparison.

Baselines trained beside the components (``full``, ``lora``; ``head`` when the gain is measured from
the initial accuracy) get the same accuracy and gain, and no rank: they have no plasticity.

Accuracy and gain get Student-t 95% intervals across seeds. The rank correlations (Spearman, Kendall
tau-b) between plasticity and gain get a percentile bootstrap interval where every replicate resamples
seeds (one multiset shared by all components and learning rates, the learning-rate choice made again)
and pair chunks (one multiset shared by all components), and exact permutation p-values (components'
gains shuffled against their plasticities).
"""

from __future__ import annotations

import math

import numpy as np

from .paired import paired_tests
from .samples import Accuracy, Plasticity, claim_samples
from .statistics import (
    association,
    bounded_t_interval,
    percentile_interval,
    rank_tests,
    theil_sen,
    too_few_to_resample,
)

LEVEL = 0.95
RELATIVE_GAIN = ("(acc - acc_LP) / acc_LP; acc: the best over learning rates of the mean test accuracy over "
                 "seeds; acc_LP: the head-only run's (linear probing), as the paper computes it")
VALIDATED = "the same with each lr chosen on a validation split held out from the training data"
NO_HOLDOUT = "(not available: the runs hold no held-out validation accuracy)"
ACC, GAIN = (0.0, 1.0), (-1.0, 1.0)  # what an accuracy and a gain can be


def analyse(measured: dict, summaries: list[dict], *, components: list[str], lrs: list[float],
            seeds: list[int], baseline: str = "head", extra: tuple[str, ...] | list[str] = (),
            bootstrap: int = 2000, permutations: int = 10000, seed: int = 0,
            criteria: dict | None = None) -> dict:
    """The claim's result: per-component rows, correlations, their bootstrap and permutation tests;
    ``extra``: baselines trained beside the components (full, lora; head when it is not the gain's
    reference), reported with their accuracy and gain, not ranked. ``criteria``: ``{name: {"scores":
    {component: score}, "seconds": s}}`` of the criteria other than plasticity, each correlated with
    the gains as plasticity is (plasticity's row comes from this measurement).

    In three steps: the arrays (`vitplast.claim.samples.claim_samples`), the tests on them
    (`vitplast.claim.statistics`), the rows of the result (`_result`)."""
    trains = list(components) + list(extra) + (["head"] if baseline == "head" else [])
    samples = claim_samples(measured, summaries, trains=trains, ranked=len(components), lrs=lrs, seeds=seeds,
                            baseline=baseline, bootstrap=bootstrap, seed=seed)
    acc, plast = samples.accuracy, samples.plasticity
    missing = [c for c in components if c not in plast.components]
    if missing:
        raise ValueError(f"components {missing} were not measured (measured: {measured['components']})")
    col = [plast.components.index(c) for c in components]
    p_value, p_reps = plast.overall[col], plast.overall_reps[:, col]  # (C,), (B, C)
    gain = acc.gains_seed[: len(components)].mean(-1)
    sizes = np.array([acc.params[c] for c in components], dtype=np.float64)
    scored = {"plasticity": dict(zip(components, p_value.tolist(), strict=True)),  # {criterion: {c: score}}
              **{name: c["scores"] for name, c in (criteria or {}).items()}}
    scores = {name: np.array([per_component.get(k, math.nan) for k in components], dtype=np.float64)
              for name, per_component in scored.items()}  # None (undefined) becomes NaN
    defined = {name: np.isfinite(x) & np.isfinite(gain) for name, x in scores.items()}

    tests = {
        "withheld": too_few_to_resample(seeds=samples.seeds, pair_chunks=samples.pair_chunks),
        "chunks_withheld": too_few_to_resample(pair_chunks=samples.pair_chunks),
        "correlations": rank_tests(p_value, gain, p_reps, acc.gain_reps, permutations=permutations, seed=seed,
                                   level=LEVEL),
        "by_size": rank_tests(sizes, gain, permutations=permutations, seed=seed),
        "trend": theil_sen(p_value, gain),
        "plasticity_ci": [percentile_interval(r, LEVEL) for r in plast.overall_reps.T],
        "per_layer_ci": [[percentile_interval(r, LEVEL) for r in reps]
                         for reps in plast.per_layer_reps.transpose(1, 2, 0)],  # (C, L)
        "accuracy": [bounded_t_interval(v, ACC, LEVEL) for v in acc.per_seed],
        "gain": [bounded_t_interval(v, GAIN, LEVEL) for v in acc.gains_seed],
        "initial": bounded_t_interval(acc.initial, ACC, LEVEL),
        "criteria": {name: association(x[ok], gain[ok], acc.gain_reps[:, ok], sizes[ok],
                                       permutations=permutations, seed=seed, level=LEVEL)
                     for (name, x), ok in zip(scores.items(), defined.values(), strict=True)
                     if ok.sum() >= 3},
        "mha": (paired_tests("MHA", {c: acc.per_seed[i].tolist() for i, c in enumerate(components)})
                if "MHA" in components and len(components) >= 2 else None),
    }
    bootstrap = {"replicates": bootstrap, "seeds": samples.seeds, "pair_chunks": samples.pair_chunks,
                 "pairs": int(measured["pairs"]), "level": LEVEL, "withheld": tests["withheld"]}
    return _result(acc, plast, tests, components=components, extra=list(extra), baseline=baseline, lrs=lrs,
                   p_value=p_value, gain=gain, counts={k: int(v.sum()) for k, v in defined.items()},
                   bootstrap=bootstrap)


def finite(x: float) -> float | None:
    """``x`` as a float, None when it is not finite (NaN: undefined)."""
    return float(x) if math.isfinite(x) else None


def interval_record(interval: tuple, n: int) -> dict:
    """A `vitplast.claim.statistics.bounded_t_interval` over ``n`` seeds as the result writes it."""
    mean, lo, hi, clipped = interval
    return {"mean": mean, "ci": [finite(lo), finite(hi)], "n": n, "interval": "student-t", "clipped": clipped}


def bootstrap_ci(interval, withheld: str | None) -> list:
    """A percentile interval as the result writes it; none (``[None, None]``) when ``withheld`` says
    why or there are no replicates (``interval`` None)."""
    if interval is None or withheld:
        return [None, None]
    return [finite(v) for v in interval]


def accuracy_columns(acc: Accuracy, t: int, tests: dict, lrs: list[float]) -> dict:
    """Train ``t``'s best lr (``lr_edge``: at the grid's edge?), its trainable parameters and its
    accuracy at that lr, with its interval over the seeds (``tests["accuracy"]``)."""
    return {"lr": float(lrs[acc.best_idx[t]]), "lr_edge": acc.lr_edges[t],
            "trainable_params": acc.params[acc.trains[t]],
            "accuracy": interval_record(tests["accuracy"][t], acc.per_seed.shape[1])}


def gain_columns(acc: Accuracy, t: int, tests: dict) -> dict:
    """Train ``t``'s gain over the reference, with its interval over the seeds (``tests["gain"]``), and
    seed by seed."""
    return {"accuracy_gain": interval_record(tests["gain"][t], acc.gains_seed.shape[1]),
            "accuracy_gain_per_seed": acc.gains_seed[t].tolist()}


def _seed_columns(acc: Accuracy, t: int) -> dict:
    return {"accuracy_per_seed": acc.per_seed[t].tolist(), "accuracy_by_lr": acc.by_lr[t]}


def _plasticity_records(plast: Plasticity, tests: dict) -> dict:
    """Every measured component's plasticity with its bootstrap intervals (none from fewer than 5
    chunks), per layer, and its pairs."""
    withheld = tests["chunks_withheld"]
    out = {}
    for i, c in enumerate(plast.components):
        out[c] = {
            "value": float(plast.overall[i]),
            "ci": [None, None] if withheld else list(tests["plasticity_ci"][i]),
            "per_layer": [float(v) if math.isfinite(v) else None for v in plast.per_layer[i]],
            "per_layer_ci": [[None, None] if withheld else list(v) for v in tests["per_layer_ci"][i]],
            "pairs": int(plast.pairs[i]), "excluded": int(plast.excluded[i]),
        }
    return out


def _result(acc: Accuracy, plast: Plasticity, tests: dict, *, components, extra, baseline, lrs, p_value, gain,
            counts, bootstrap) -> dict:
    """The result's rows and records from the arrays and the tests."""
    measured = _plasticity_records(plast, tests)
    rows = [{"component": c, "plasticity": measured[c]["value"], "plasticity_ci": measured[c]["ci"],
             "plasticity_per_layer": measured[c]["per_layer"],
             "plasticity_per_layer_ci": measured[c]["per_layer_ci"], "pairs": measured[c]["pairs"],
             "excluded_pairs": measured[c]["excluded"], **accuracy_columns(acc, i, tests, lrs),
             **_seed_columns(acc, i), **gain_columns(acc, i, tests)} for i, c in enumerate(components)]
    base_row = {"train": baseline, "initial_accuracy": interval_record(tests["initial"], acc.initial.size)}
    if baseline == "head":
        head = len(acc.trains) - 1
        base_row.update(**accuracy_columns(acc, head, tests, lrs), **_seed_columns(acc, head))
    extra_rows = [{"train": b, **accuracy_columns(acc, t, tests, lrs), **_seed_columns(acc, t),
                   **gain_columns(acc, t, tests)} for t, b in enumerate(extra, start=len(components))]
    for t, row in enumerate(rows + extra_rows):
        row["relative_gain"] = finite(float(acc.relative_gain[t]))
        row["relative_gain_validated"] = finite(float(acc.relative_gain_validated[t]))
    withheld = tests["withheld"]
    correlations = {name: {"value": finite(r["observed"]), "ci": bootstrap_ci(r["interval"], withheld),
                           "p_greater": finite(r["greater"]), "p_two_sided": finite(r["two_sided"]),
                           "permutations": r["permutations"], "exact": r["exact"],
                           "bootstrap_defined": r["defined"]}
                    for name, r in tests["correlations"].items()}
    slope, intercept = tests["trend"]
    return {
        "rows": rows, "baseline": base_row, "baselines": extra_rows, "correlations": correlations,
        "params_correlations": {name: {"value": finite(r["observed"]), "p_greater": finite(r["greater"])}
                                for name, r in tests["by_size"].items()},
        "trend": {"method": "theil-sen", "slope": finite(slope), "intercept": finite(intercept)},
        "ranking": {"plasticity": [components[i] for i in np.argsort(-p_value, kind="stable")],
                    "accuracy_gain": [components[i] for i in np.argsort(-gain, kind="stable")]},
        "layers": list(plast.layers),
        "other_measured": {c: v for c, v in measured.items() if c not in components},
        "bootstrap": bootstrap,
        "criteria": criteria_rows(tests["criteria"], counts, withheld),
        "verdict": verdict(correlations["spearman"], len(components)),
        "relative_gain": {"definition": RELATIVE_GAIN,
                          "validated": VALIDATED if acc.holdout else f"{VALIDATED} {NO_HOLDOUT}"},
        "mha_tests": tests["mha"],
    }


def criteria_rows(tests: dict, counts: dict, withheld: str | None, granularity: str = "component"
                  ) -> list[dict]:
    """One row per criterion (``counts``: ``{name: units where its score and the gain are defined}``;
    ``tests``: the `vitplast.claim.statistics.association` of those with at least 3): its Spearman
    with the bootstrap interval over seeds (none when ``withheld``), Kendall's tau-b, the one-sided
    permutation p of Spearman (H1: rho > 0) and the partial Spearman with the trainable-parameter count
    held fixed (null for ``size``, which is that count)."""
    rows = []
    for name, n in counts.items():
        row = {"criterion": name, "granularity": granularity, "n": n, "spearman": None,
               "spearman_ci": [None, None], "kendall": None, "p_value": None, "partial_size": None}
        test = tests.get(name)
        if test is not None and math.isfinite(test["spearman"]):
            row.update(spearman=finite(test["spearman"]),
                       spearman_ci=bootstrap_ci(test["interval"], withheld),
                       kendall=finite(test["kendall"]), p_value=finite(test["p_greater"]),
                       partial_size=None if name == "size" else finite(test["partial"]))
        rows.append(row)
    return rows


def verdict(spearman: dict, n: int) -> str:
    """One sentence on what the Spearman correlation, its interval and its p-value support."""
    rho, (lo, hi), p = spearman["value"], spearman["ci"], spearman["p_greater"]
    if rho is None or p is None:
        return "undefined: plasticity or accuracy gain is constant across the components"
    floor = 1 / math.factorial(n) if n <= 8 else None
    floor_text = f" (with {n} components the smallest possible p is {floor:.3g})" if floor else ""
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
