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

from .plasticity import summarize_chunks
from .statistics import (
    STATISTICS,
    kendall_tau_b,
    paired_tests,
    partial_spearman,
    percentile_interval,
    permutation_test,
    resample_counts,
    spearman,
    t_interval,
    theil_sen,
    too_few_to_resample,
)

LEVEL = 0.95
RELATIVE_GAIN = ("(acc - acc_LP) / acc_LP; acc: the best over learning rates of the mean test accuracy over "
                 "seeds; acc_LP: the head-only run's (linear probing), as the paper computes it")
VALIDATED = "the same with each lr chosen on a validation split held out from the training data"
NO_HOLDOUT = "(not available: the runs hold no held-out validation accuracy)"
ACC, GAIN = (0.0, 1.0), (-1.0, 1.0)  # what an accuracy and a gain can be


def accuracy_cube(summaries: list[dict], trains: list[str], lrs: list[float], seeds: list[int]):
    """``(acc (T, LR, S), initial (S,), params {train: n})`` from run summaries. A (train, lr) is run
    for every seed or for none (``--lr auto`` widens one train's grid only): NaN marks one not run."""
    acc = np.full((len(trains), len(lrs), len(seeds)), np.nan)
    initial = np.full((len(seeds),), np.nan)
    params: dict[str, int] = {}
    ti, li, si = ({t: i for i, t in enumerate(trains)}, {float(v): i for i, v in enumerate(lrs)},
                  {s: i for i, s in enumerate(seeds)})
    for s in summaries:
        acc[ti[s["train"]], li[float(s["lr"])], si[int(s["seed"])]] = s["final_acc"]
        initial[si[int(s["seed"])]] = s["initial_acc"]
        params[s["train"]] = int(s["trainable_params"])
    missing = np.isnan(acc)
    if (missing.any(-1) & ~missing.all(-1)).any() or missing.all(-1).all(-1).any():
        raise ValueError("accuracy_cube: a (train, lr, seed) combination has no summary")
    return acc, initial, params


def _best(acc_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(best value, its index)`` over the learning-rate axis (-1), lrs not run (NaN) skipped; ties:
    the first lr listed."""
    idx = np.argmax(np.where(np.isnan(acc_mean), -np.inf, acc_mean), axis=-1)
    return np.take_along_axis(acc_mean, idx[..., None], -1)[..., 0], idx


def best_replicates(acc: np.ndarray, seed_counts: np.ndarray) -> np.ndarray:
    """``(B, T)``: each train's best mean accuracy over its lrs when the seeds are resampled with
    ``seed_counts`` ``(B, S)`` (the lr chosen again in each replicate)."""
    run = ~np.isnan(acc).all(-1)  # (T, LR)
    reps = np.einsum("tls,bs->btl", np.nan_to_num(acc), seed_counts) / acc.shape[-1]
    return np.where(run[None], reps, -np.inf).max(-1)


def lr_edge(acc: np.ndarray, t: int, idx: int) -> str | None:
    """``"low"``/``"high"`` when train ``t``'s best lr index ``idx`` is the smallest/largest lr it was
    run at (its gain may be clipped by the grid), None when interior or with one lr only."""
    run = np.flatnonzero(~np.isnan(acc[t]).all(-1))
    if len(run) < 2:
        return None
    return "low" if idx == run[0] else "high" if idx == run[-1] else None


def by_lr(acc: np.ndarray, t: int, lrs: list[float]) -> dict[str, float]:
    """``{lr: mean accuracy}`` of train ``t`` over the lrs it was run at."""
    return {f"{lr:g}": float(v) for lr, v in zip(lrs, acc[t].mean(-1), strict=True) if np.isfinite(v)}


def _interval(values, bounds: tuple[float, float]) -> dict:
    """Mean and Student-t interval over the ``n`` seeds, the interval cut to ``bounds`` (with few seeds
    the t interval can reach beyond what an accuracy or a gain can be): ``clipped`` names the bound(s)
    it was cut at (``"low"``, ``"high"``, ``"both"``), None when it was not."""
    mean, lo, hi = t_interval(values, LEVEL)
    cut_lo, cut_hi = math.isfinite(lo) and lo < bounds[0], math.isfinite(hi) and hi > bounds[1]
    clipped = "both" if cut_lo and cut_hi else "low" if cut_lo else "high" if cut_hi else None
    return {"mean": mean, "ci": [max(lo, bounds[0]) if math.isfinite(lo) else None,
                                 min(hi, bounds[1]) if math.isfinite(hi) else None],
            "n": int(np.asarray(values).size), "interval": "student-t", "clipped": clipped}


def relative_gains(best: np.ndarray, head: int | None) -> np.ndarray:
    """The paper's ``relative_gain = (acc - acc_LP) / acc_LP`` per train: ``acc`` its best mean accuracy
    over seeds across learning rates (``best``, ``(T,)``), ``acc_LP`` the head-only run's (linear
    probing, train index ``head``); NaN without a head-only run."""
    if head is None or not best[head] > 0:
        return np.full(best.shape, np.nan)
    return (best - best[head]) / best[head]


def holdout_cube(summaries: list[dict], trains: list[str], lrs: list[float], seeds: list[int]):
    """``(T, LR, S)`` accuracy on a validation split held out from the training data (the summaries'
    ``holdout_acc``), or None when a run has none (the runs of this version hold none)."""
    if not summaries or any(s.get("holdout_acc") is None for s in summaries):
        return None
    cube, _, _ = accuracy_cube([{**s, "final_acc": s["holdout_acc"]} for s in summaries], trains, lrs, seeds)
    return cube


def relative_gains_validated(acc: np.ndarray, holdout: np.ndarray | None, head: int | None) -> np.ndarray:
    """The relative gain with each train's lr chosen on the held-out validation split (its test
    accuracy at that lr): the paper picks the lr on the test set, which flatters the gains. NaN when the
    runs hold no validation accuracy or there is no head-only run."""
    if holdout is None or head is None:
        return np.full(acc.shape[0], np.nan)
    _, idx = _best(holdout.mean(-1))
    chosen = acc.mean(-1)[np.arange(acc.shape[0]), idx]
    return relative_gains(chosen, head)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def analyse(measured: dict, summaries: list[dict], *, components: list[str], lrs: list[float],
            seeds: list[int], baseline: str = "head", extra: tuple[str, ...] | list[str] = (),
            bootstrap: int = 2000, permutations: int = 10000, seed: int = 0,
            criteria: dict | None = None) -> dict:
    """The claim's result: per-component rows, correlations, their bootstrap and permutation tests;
    ``extra``: baselines trained beside the components (full, lora; head when it is not the gain's
    reference), reported with their accuracy and gain, not ranked. ``criteria``: ``{name: {"scores":
    {component: score}, "seconds": s}}`` of the criteria other than plasticity, each correlated with
    the gains as plasticity is (`criteria_rows`; plasticity's row comes from this measurement)."""
    trains = list(components) + list(extra) + (["head"] if baseline == "head" else [])
    acc, initial, params = accuracy_cube(summaries, trains, lrs, seeds)
    n_c, n_s = len(components), len(seeds)
    rng = np.random.default_rng(seed)
    seed_counts = resample_counts(rng, n_s, bootstrap)  # (B, S)
    chunk_counts = resample_counts(rng, int(measured["chunks"]), bootstrap)  # (B, K)

    plast = summarize_chunks(measured, chunk_counts, LEVEL)
    missing = [c for c in components if c not in plast["components"]]
    if missing:
        raise ValueError(f"components {missing} were not measured (measured: {measured['components']})")
    col = [measured["components"].index(c) for c in components]
    p_value = np.array([plast["components"][c]["value"] for c in components])
    p_reps = plast["replicates"][:, col]  # (B, C)

    best, best_idx = _best(acc.mean(-1))  # (T,)
    per_seed = acc[np.arange(len(trains)), best_idx]  # (T, S) at each train's chosen lr
    base_seed = per_seed[-1] if baseline == "head" else initial
    gains_seed = per_seed[:n_c] - base_seed  # (C, S)
    gain = gains_seed.mean(-1)

    # bootstrap replicates of the gains: seeds resampled, best lr chosen again in each replicate
    best_reps = best_replicates(acc, seed_counts)  # (B, T)
    base_reps = best_reps[:, -1] if baseline == "head" else seed_counts @ initial / n_s
    g_reps = best_reps[:, :n_c] - base_reps[:, None]  # (B, C)

    sizes = np.array([params[c] for c in components], dtype=np.float64)
    withheld = too_few_to_resample(seeds=n_s, pair_chunks=int(measured["chunks"]))
    correlations, size_corr = correlation_tests(p_value, gain, p_reps, g_reps, sizes, permutations, seed,
                                                withheld=withheld)
    slope, intercept = theil_sen(p_value, gain)

    rows = []
    for i, c in enumerate(components):
        pc = plast["components"][c]
        rows.append({
            "component": c, "plasticity": pc["value"], "plasticity_ci": pc["ci"],
            "plasticity_per_layer": pc["per_layer"], "plasticity_per_layer_ci": pc["per_layer_ci"],
            "pairs": pc["pairs"], "excluded_pairs": pc["excluded"],
            "trainable_params": params[c], "lr": float(lrs[best_idx[i]]),
            "lr_edge": lr_edge(acc, i, int(best_idx[i])),
            "accuracy": _interval(per_seed[i], ACC), "accuracy_per_seed": per_seed[i].tolist(),
            "accuracy_by_lr": by_lr(acc, i, lrs),
            "accuracy_gain": _interval(gains_seed[i], GAIN), "accuracy_gain_per_seed": gains_seed[i].tolist(),
        })
    base_row = {"train": baseline, "initial_accuracy": _interval(initial, ACC)}
    if baseline == "head":
        base_row.update(lr=float(lrs[best_idx[-1]]), lr_edge=lr_edge(acc, len(trains) - 1, int(best_idx[-1])),
                        trainable_params=params["head"],
                        accuracy=_interval(per_seed[-1], ACC), accuracy_per_seed=per_seed[-1].tolist(),
                        accuracy_by_lr=by_lr(acc, len(trains) - 1, lrs))
    per_layer_only = {c: v for c, v in plast["components"].items() if c not in components}
    extra_rows = [_baseline_row(b, n_c + k, acc, best_idx, per_seed, base_seed, params, lrs)
                  for k, b in enumerate(extra)]
    scored = {"plasticity": {"scores": dict(zip(components, p_value.tolist(), strict=True))},
              **(criteria or {})}
    result = {
        "rows": rows, "baseline": base_row, "baselines": extra_rows, "correlations": correlations,
        "params_correlations": size_corr,
        "trend": {"method": "theil-sen", "slope": _finite(slope), "intercept": _finite(intercept)},
        "ranking": {"plasticity": [components[i] for i in np.argsort(-p_value, kind="stable")],
                    "accuracy_gain": [components[i] for i in np.argsort(-gain, kind="stable")]},
        "layers": list(measured["layers"]), "other_measured": per_layer_only,
        "bootstrap": {"replicates": bootstrap, "seeds": n_s, "pair_chunks": int(measured["chunks"]),
                      "pairs": int(measured["pairs"]), "level": LEVEL, "withheld": withheld},
        "criteria": criteria_rows(scored, components, gain, g_reps, sizes, permutations=permutations,
                                  seed=seed, withheld=withheld),
        "verdict": verdict(correlations["spearman"], n_c),
    }
    result.update(paper_statistics(rows + extra_rows, summaries, trains, lrs, seeds, acc, components))
    return result


def paper_statistics(rows: list[dict], summaries: list[dict], trains: list[str], lrs: list[float],
                     seeds: list[int], acc: np.ndarray, components: list[str]) -> dict:
    """The paper's statistics, named as it names them: each row's ``relative_gain`` and
    ``relative_gain_validated`` (set on ``rows``, in ``trains`` order), and ``mha_tests``: MHA against
    each other component, over the seeds (`vitplast.claim.statistics.paired_tests`)."""
    head = trains.index("head") if "head" in trains else None
    best, best_idx = _best(acc.mean(-1))
    holdout = holdout_cube(summaries, trains, lrs, seeds)
    rel, rel_val = relative_gains(best, head), relative_gains_validated(acc, holdout, head)
    for t, row in enumerate(rows):
        row["relative_gain"] = _finite(float(rel[t]))
        row["relative_gain_validated"] = _finite(float(rel_val[t]))
    per_seed = acc[np.arange(len(trains)), best_idx]
    mha = None
    if "MHA" in components and len(components) >= 2:
        mha = paired_tests("MHA", {c: per_seed[trains.index(c)].tolist() for c in components})
    return {"relative_gain": {"definition": RELATIVE_GAIN,
                              "validated": VALIDATED if holdout is not None else f"{VALIDATED} {NO_HOLDOUT}"},
            "mha_tests": mha}


def criteria_rows(criteria: dict, components: list[str], gain: np.ndarray, g_reps: np.ndarray,
                  sizes: np.ndarray, *, permutations: int, seed: int, withheld: str | None,
                  granularity: str = "component") -> list[dict]:
    """One row per criterion: its scores against the accuracy gains of the ``components`` (units where
    both are defined: ``n``), Spearman with its bootstrap interval over seeds (none when ``withheld``),
    Kendall's tau-b, the one-sided permutation p of Spearman (H1: rho > 0) and the partial Spearman with
    the trainable-parameter count held fixed (null for ``size``, which is that count); the scoring time
    is the measurement's (``criteria.json`` puts it beside)."""
    rows = []
    for name, c in criteria.items():
        x = np.array([c["scores"].get(k, math.nan) for k in components], dtype=np.float64)
        x = np.array([math.nan if v is None else v for v in x], dtype=np.float64)
        ok = np.isfinite(x) & np.isfinite(gain)
        n = int(ok.sum())
        row = {"criterion": name, "granularity": granularity, "n": n, "spearman": None,
               "spearman_ci": [None, None], "kendall": None, "p_value": None, "partial_size": None}
        if n >= 3:
            xs, ys = x[ok], gain[ok]
            perm = permutation_test(xs, ys, spearman, permutations=permutations, seed=seed)
            reps = np.asarray(spearman(np.broadcast_to(xs, g_reps[:, ok].shape), g_reps[:, ok]))
            ci = [None, None] if withheld else [_finite(v) for v in percentile_interval(reps, LEVEL)]
            partial = None if name == "size" else _finite(float(partial_spearman(xs, ys, sizes[ok])))
            row.update(spearman=_finite(float(spearman(xs, ys))), spearman_ci=ci,
                       kendall=_finite(float(kendall_tau_b(xs, ys))), p_value=_finite(perm["greater"]),
                       partial_size=partial)
        rows.append(row)
    return rows


def _baseline_row(train: str, t: int, acc, best_idx, per_seed, base_seed, params, lrs) -> dict:
    """A baseline trained beside the components (full, lora): its accuracy at its best lr, and its gain
    over the reference, seed by seed."""
    gains = per_seed[t] - base_seed
    return {"train": train, "lr": float(lrs[best_idx[t]]), "lr_edge": lr_edge(acc, t, int(best_idx[t])),
            "trainable_params": params[train], "accuracy": _interval(per_seed[t], ACC),
            "accuracy_per_seed": per_seed[t].tolist(), "accuracy_by_lr": by_lr(acc, t, lrs),
            "accuracy_gain": _interval(gains, GAIN), "accuracy_gain_per_seed": gains.tolist()}


def correlation_tests(p_value, gain, p_reps, g_reps, sizes, permutations: int, seed: int, *,
                      withheld: str | None = None):
    """``(correlations, size_correlations)``: each statistic between plasticity and gain with its
    bootstrap interval (none, ``[None, None]``, when ``withheld`` says why) and permutation p-values; and
    the same tests with the trainable-parameter count in place of plasticity (a component's size is the
    obvious rival predictor of its gain)."""
    correlations, size_corr = {}, {}
    for name, fn in STATISTICS.items():
        reps = np.asarray(fn(p_reps, g_reps))
        perm = permutation_test(p_value, gain, fn, permutations=permutations, seed=seed)
        correlations[name] = {
            "value": _finite(fn(p_value, gain)),
            "ci": [None, None] if withheld else [_finite(v) for v in percentile_interval(reps, LEVEL)],
            "p_greater": _finite(perm["greater"]), "p_two_sided": _finite(perm["two_sided"]),
            "permutations": perm["permutations"], "exact": perm["exact"],
            "bootstrap_defined": int(np.isfinite(reps).sum()),
        }
        by_size = permutation_test(sizes, gain, fn, permutations=permutations, seed=seed)
        size_corr[name] = {"value": _finite(by_size["observed"]), "p_greater": _finite(by_size["greater"])}
    return correlations, size_corr


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
