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
    percentile_interval,
    permutation_test,
    resample_counts,
    t_interval,
    theil_sen,
)

LEVEL = 0.95
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
    """Mean and t interval, the interval cut to ``bounds`` (with few seeds the t interval can reach
    beyond what an accuracy or a gain can be)."""
    mean, lo, hi = t_interval(values, LEVEL)
    return {"mean": mean, "ci": [max(lo, bounds[0]) if math.isfinite(lo) else None,
                                 min(hi, bounds[1]) if math.isfinite(hi) else None]}


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def analyse(measured: dict, summaries: list[dict], *, components: list[str], lrs: list[float],
            seeds: list[int], baseline: str = "head", extra: tuple[str, ...] | list[str] = (),
            bootstrap: int = 2000, permutations: int = 10000, seed: int = 0) -> dict:
    """The claim's result: per-component rows, correlations, their bootstrap and permutation tests;
    ``extra``: baselines trained beside the components (full, lora; head when it is not the gain's
    reference), reported with their accuracy and gain, not ranked."""
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
    correlations, size_corr = correlation_tests(p_value, gain, p_reps, g_reps, sizes, permutations, seed)
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
            "gain": _interval(gains_seed[i], GAIN), "gain_per_seed": gains_seed[i].tolist(),
        })
    base_row = {"train": baseline, "initial_accuracy": _interval(initial, ACC)}
    if baseline == "head":
        base_row.update(lr=float(lrs[best_idx[-1]]), lr_edge=lr_edge(acc, len(trains) - 1, int(best_idx[-1])),
                        trainable_params=params["head"],
                        accuracy=_interval(per_seed[-1], ACC), accuracy_per_seed=per_seed[-1].tolist(),
                        accuracy_by_lr=by_lr(acc, len(trains) - 1, lrs))
    others = [c for c in measured["components"] if c not in components]
    per_layer_only = {c: plast["components"][c] for c in others}
    extra_rows = [_baseline_row(b, n_c + k, acc, best_idx, per_seed, base_seed, params, lrs)
                  for k, b in enumerate(extra)]
    return {
        "rows": rows, "baseline": base_row, "baselines": extra_rows, "correlations": correlations,
        "params_correlations": size_corr,
        "trend": {"method": "theil-sen", "slope": _finite(slope), "intercept": _finite(intercept)},
        "ranking": {"plasticity": [components[i] for i in np.argsort(-p_value, kind="stable")],
                    "gain": [components[i] for i in np.argsort(-gain, kind="stable")]},
        "layers": list(measured["layers"]), "other_measured": per_layer_only,
        "bootstrap": {"replicates": bootstrap, "seeds": n_s, "pair_chunks": int(measured["chunks"]),
                      "pairs": int(measured["pairs"]), "level": LEVEL},
        "verdict": verdict(correlations["spearman"], n_c),
    }


def _baseline_row(train: str, t: int, acc, best_idx, per_seed, base_seed, params, lrs) -> dict:
    """A baseline trained beside the components (full, lora): its accuracy at its best lr, and its gain
    over the reference, seed by seed."""
    gains = per_seed[t] - base_seed
    return {"train": train, "lr": float(lrs[best_idx[t]]), "lr_edge": lr_edge(acc, t, int(best_idx[t])),
            "trainable_params": params[train], "accuracy": _interval(per_seed[t], ACC),
            "accuracy_per_seed": per_seed[t].tolist(), "accuracy_by_lr": by_lr(acc, t, lrs),
            "gain": _interval(gains, GAIN), "gain_per_seed": gains.tolist()}


def correlation_tests(p_value, gain, p_reps, g_reps, sizes, permutations: int, seed: int):
    """``(correlations, size_correlations)``: each statistic between plasticity and gain with its
    bootstrap interval and permutation p-values; and the same tests with the trainable-parameter count
    in place of plasticity (a component's size is the obvious rival predictor of its gain)."""
    correlations, size_corr = {}, {}
    for name, fn in STATISTICS.items():
        reps = np.asarray(fn(p_reps, g_reps))
        perm = permutation_test(p_value, gain, fn, permutations=permutations, seed=seed)
        correlations[name] = {
            "value": _finite(fn(p_value, gain)), "ci": [_finite(v) for v in percentile_interval(reps, LEVEL)],
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
    if rho is None or lo is None or p is None:
        return "undefined: plasticity or gain is constant across the components"
    floor = 1 / math.factorial(n) if n <= 8 else None
    floor_text = f" (with {n} components the smallest possible p is {floor:.3g})" if floor else ""
    if p < 0.05 and lo > 0:
        return (f"supported: rho = {rho:+.2f} > 0, bootstrap CI [{lo:+.2f}, {hi:+.2f}] excludes 0, "
                f"one-sided permutation p = {p:.3g}")
    if hi < 0:
        return (f"contradicted: rho = {rho:+.2f}, bootstrap CI [{lo:+.2f}, {hi:+.2f}] lies below 0 "
                f"(one-sided p = {p:.3g}){floor_text}")
    return (f"not established: rho = {rho:+.2f}, bootstrap CI [{lo:+.2f}, {hi:+.2f}], one-sided "
            f"permutation p = {p:.3g}{floor_text}")
