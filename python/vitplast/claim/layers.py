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
- the same within-type statistics for every criterion of ``--criteria`` (`layer_criteria_rows`).

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
    _best,
    _finite,
    _interval,
    accuracy_cube,
    best_replicates,
    by_lr,
    lr_edge,
)
from .plasticity import chunk_result, unit_means
from .statistics import (
    STATISTICS,
    kendall_tau_b,
    partial_p_greater,
    partial_spearman,
    percentile_interval,
    permutation_test,
    resample_counts,
    spearman,
    stratified_permutation_test,
    theil_sen,
    too_few_to_resample,
)


def units_of(measured: dict, components: list[str]) -> list[tuple[str, int]]:
    """``(component, layer index)`` of every measured unit of ``components``, component-major."""
    missing = [c for c in components if c not in measured["components"]]
    if missing:
        raise ValueError(f"components {missing} were not measured (measured: {measured['components']})")
    return [(c, li) for c in components for li in range(len(measured["layers"]))]


def unit_name(unit: tuple[str, int]) -> str:
    return f"{unit[0]}@{unit[1]}"


def unit_plasticity(measured: dict) -> np.ndarray:
    """``(C, L)`` mean rate of every (component, layer) over all pairs (NaN without pairs)."""
    return unit_means(measured)


def _boot(reps, withheld: str | None) -> list:
    """The percentile interval of bootstrap ``reps``; none (``[None, None]``) when ``withheld`` says why."""
    if reps is None or withheld:
        return [None, None]
    return [_finite(v) for v in percentile_interval(reps, LEVEL)]


def _rank_block(x: np.ndarray, y: np.ndarray, x_reps: np.ndarray, y_reps: np.ndarray,
                permutations: int, seed: int, withheld: str | None = None) -> dict:
    out = {}
    for name, fn in STATISTICS.items():
        perm = permutation_test(x, y, fn, permutations=permutations, seed=seed)
        reps = np.asarray(fn(x_reps, y_reps)) if x_reps is not None else None
        out[name] = {"value": _finite(perm["observed"]), "p_greater": _finite(perm["greater"]),
                     "p_two_sided": _finite(perm["two_sided"]), "permutations": perm["permutations"],
                     "exact": perm["exact"],
                     "ci": _boot(reps, withheld)}
    return out


def analyse_layers(measured: dict, summaries: list[dict], *, units: list[tuple[str, int]],
                   lrs: list[float], seeds: list[int], bootstrap: int = 2000, permutations: int = 10000,
                   seed: int = 0, criteria: dict | None = None) -> dict:
    """The layer-granularity result: per-unit rows and the statistics above; ``criteria``: ``{name:
    {unit name: score}}`` (plasticity's included), each compared with the gains within types."""
    names = [unit_name(u) for u in units]
    trains = names + ["head"]
    acc, initial, params = accuracy_cube(summaries, trains, lrs, seeds)
    n_u, n_s = len(units), len(seeds)
    rng = np.random.default_rng(seed)
    seed_counts = resample_counts(rng, n_s, bootstrap)
    chunk_counts = resample_counts(rng, int(measured["chunks"]), bootstrap)

    ci_of = {c: i for i, c in enumerate(measured["components"])}
    cols = ([ci_of[c] for c, _ in units], [li for _, li in units])
    p_value = unit_means(measured)[cols]  # (U,)
    p_reps = chunk_result(measured).replicate_means(chunk_counts)[0].numpy()[:, cols[0], cols[1]]  # (B, U)

    best, best_idx = _best(acc.mean(-1))
    per_seed = acc[np.arange(len(trains)), best_idx]  # (T, S)
    gains_seed = per_seed[:-1] - per_seed[-1]  # every train against the head-only run of its seed
    gain = gains_seed.mean(-1)
    best_reps = best_replicates(acc, seed_counts)
    g_reps = best_reps[:, :n_u] - best_reps[:, -1:]  # (B, U)

    sizes = np.array([params[n] for n in names], dtype=np.float64)
    types = np.array([c for c, _ in units])
    withheld = too_few_to_resample(seeds=n_s, pair_chunks=int(measured["chunks"]))
    correlations = _rank_block(p_value, gain[:n_u], p_reps, g_reps, permutations, seed, withheld)
    size_corr = _rank_block(sizes, gain[:n_u], None, None, permutations, seed)
    strat = stratified_permutation_test(p_value, gain[:n_u], types, permutations=permutations, seed=seed)
    per_type = _per_type(types, p_value, gain[:n_u], p_reps, g_reps, sizes, withheld)
    part = float(partial_spearman(p_value, gain[:n_u], sizes))
    part_reps = np.asarray(partial_spearman(p_reps, g_reps, np.broadcast_to(sizes, p_reps.shape)))
    slope, intercept = theil_sen(p_value, gain[:n_u])

    rows = []
    for i, (c, li) in enumerate(units):
        rows.append({
            "unit": names[i], "component": c, "layer": measured["layers"][li], "layer_index": li,
            "plasticity": _finite(p_value[i]),
            "plasticity_ci": _boot(p_reps[:, i], too_few_to_resample(pair_chunks=int(measured["chunks"]))),
            "trainable_params": params[names[i]], "lr": float(lrs[best_idx[i]]),
            "lr_edge": lr_edge(acc, i, int(best_idx[i])),
            "accuracy": _interval(per_seed[i], ACC), "accuracy_gain": _interval(gains_seed[i], GAIN),
            "accuracy_gain_per_seed": gains_seed[i].tolist(),
            "accuracy_by_lr": by_lr(acc, i, lrs),
        })
    base = {"train": "head", "lr": float(lrs[best_idx[-1]]),
            "lr_edge": lr_edge(acc, len(trains) - 1, int(best_idx[-1])),
            "trainable_params": params["head"], "accuracy": _interval(per_seed[-1], ACC),
            "initial_accuracy": _interval(initial, ACC)}
    result = {
        "granularity": "layer", "rows": rows, "baseline": base, "correlations": correlations,
        "params_correlations": size_corr,
        "within_type": {"stratified_p_greater": _finite(strat["greater"]),
                        "stratified_p_two_sided": _finite(strat["two_sided"]),
                        "pooled_spearman": _finite(strat["observed"]), "exact": strat["exact"],
                        "permutations": strat["permutations"], "per_type": per_type},
        "partial": {"spearman": _finite(part),
                    "ci": _boot(part_reps, withheld),
                    "p_greater": _finite(partial_p_greater(part, n_u)), "controls": "trainable parameters"},
        "trend": {"method": "theil-sen", "slope": _finite(slope), "intercept": _finite(intercept)},
        "criteria": layer_criteria_rows(criteria or {}, names, types, gain[:n_u], g_reps, sizes,
                                        permutations=permutations, seed=seed, withheld=withheld),
        "layers": list(measured["layers"]),
        "lr_edges": [r["unit"] for r in rows if r["lr_edge"]] + (["head"] if base["lr_edge"] else []),
        "bootstrap": {"replicates": bootstrap, "seeds": n_s, "pair_chunks": int(measured["chunks"]),
                      "pairs": int(measured["pairs"]), "level": LEVEL, "withheld": withheld},
    }
    return result


def _per_type(types, p_value, gain, p_reps, g_reps, sizes, withheld: str | None = None) -> dict:
    """Spearman's rho within each component type (its units across layers), with its interval."""
    out = {}
    for c in dict.fromkeys(types.tolist()):
        m = types == c
        reps = np.asarray(spearman(p_reps[:, m], g_reps[:, m]))
        out[c] = {"spearman": _finite(float(spearman(p_value[m], gain[m]))),
                  "ci": _boot(reps, withheld), "units": int(m.sum()),
                  "trainable_params": int(sizes[m][0])}
    return out


def pooled_within(x: np.ndarray, ys: np.ndarray, types: np.ndarray, statistic) -> np.ndarray:
    """``(R,)``: for each row of ``ys`` ``(R, U)``, ``statistic`` of ``x`` ``(U,)`` and the row within
    each component type, averaged over the types weighted by their units (types where it is undefined
    left out): the pooled within-type association (`.statistics.within_strata`, for many rows)."""
    num, den = np.zeros(len(ys)), np.zeros(len(ys))
    for c in dict.fromkeys(types.tolist()):
        m = types == c
        if m.sum() < 2:
            continue
        v = np.asarray(statistic(np.broadcast_to(x[m], ys[:, m].shape), ys[:, m]), dtype=np.float64)
        num, den = num + np.where(np.isfinite(v), v * m.sum(), 0.0), den + np.isfinite(v) * m.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def layer_criteria_rows(criteria: dict, names: list[str], types: np.ndarray, gain: np.ndarray,
                        g_reps: np.ndarray, sizes: np.ndarray, *, permutations: int, seed: int,
                        withheld: str | None) -> list[dict]:
    """One row per criterion at layer granularity, within component type across layers (where every
    unit of a type has the same size): over the ``n`` units where the score and the gain are defined,
    the pooled within-type Spearman (its bootstrap interval over seeds from ``g_reps``, none when
    ``withheld``) and Kendall tau-b, the one-sided stratified permutation p of the Spearman (gains
    permuted among units of the same type; H1: rho > 0), and the partial Spearman over all units with
    the trainable-parameter count held fixed (null for ``size``)."""
    rows = []
    for name, per_unit in criteria.items():
        x = np.array([math.nan if per_unit.get(u) is None else per_unit[u] for u in names], dtype=np.float64)
        ok = np.isfinite(x) & np.isfinite(gain)
        row = {"criterion": name, "granularity": "layer", "n": int(ok.sum()), "spearman": None,
               "spearman_ci": [None, None], "kendall": None, "p_value": None, "partial_size": None}
        xs, ys, ts = x[ok], gain[ok], types[ok]
        rho = float(pooled_within(xs, ys[None], ts, spearman)[0]) if ok.sum() >= 3 else math.nan
        if math.isfinite(rho):
            test = stratified_permutation_test(xs, ys, ts, permutations=permutations, seed=seed)
            reps = pooled_within(xs, g_reps[:, ok], ts, spearman)
            row.update(spearman=_finite(rho), spearman_ci=_boot(reps, withheld),
                       kendall=_finite(float(pooled_within(xs, ys[None], ts, kendall_tau_b)[0])),
                       p_value=_finite(test["greater"]),
                       partial_size=None if name == "size" else _finite(float(partial_spearman(xs, ys,
                                                                                               sizes[ok]))))
        rows.append(row)
    return rows
