"""Paired comparisons for `vitplast claim`: one component (MHA) against each other one over paired
observations (the (dataset, seed) pairs), by the paired t-test and the one-sided Wilcoxon
signed-rank test of ``scipy.stats``, each Holm-corrected over the comparisons (Holm, "A simple
sequentially rejective multiple test procedure", Scand. J. Statist. 1979) (`paired_tests`). Pure
functions on arrays."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats


def holm(p_values) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (family-wise error), in their order; NaN stays NaN
    and does not count in the family. (scipy has no Holm; ``false_discovery_control`` is BH/BY.)"""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = len(idx)
    running = 0.0
    for rank, k in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[k]))
        out[k] = running
    return out.tolist()


def paired_tests(reference: str, accuracy: dict[str, list[float]]) -> dict:
    """``reference`` (MHA) against each other component, over paired observations (the (dataset, seed)
    pairs: ``accuracy[c][k]`` is component ``c``'s accuracy on pair ``k``): the paired t-test
    (``scipy.stats.ttest_rel``, two-sided) and the one-sided Wilcoxon signed-rank test (``wilcoxon``,
    H1: the reference is more accurate), each Holm-corrected over the comparisons. Per comparison:
    ``n`` (pairs), ``mean_difference``, ``t``, ``t_p``, ``t_p_holm``, ``wilcoxon_p``,
    ``wilcoxon_p_holm``. NaN (null) where a test is undefined (fewer than 2 pairs; no non-zero
    difference)."""
    ref = np.asarray(accuracy[reference], dtype=np.float64)
    rows = {}
    for c, values in accuracy.items():
        if c == reference:
            continue
        other = np.asarray(values, dtype=np.float64)
        d = ref - other
        t, tp, wp = math.nan, math.nan, math.nan
        if d.size >= 2 and np.ptp(d) > 0:
            res = stats.ttest_rel(ref, other)
            t, tp = float(res.statistic), float(res.pvalue)
        if np.count_nonzero(d) >= 1:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                wp = float(stats.wilcoxon(ref, other, alternative="greater").pvalue)
        rows[c] = {"n": int(d.size), "mean_difference": float(d.mean()) if d.size else math.nan, "t": t,
                   "t_p": tp, "wilcoxon_p": wp}
    names = list(rows)
    for key in ("t_p", "wilcoxon_p"):
        for c, adj in zip(names, holm([rows[c][key] for c in names]), strict=True):
            rows[c][f"{key}_holm"] = adj
    return {"reference": reference, "comparisons": rows,
            "tests": "paired t (two-sided, scipy.stats.ttest_rel); Wilcoxon signed-rank (one-sided, "
                     "reference more accurate, scipy.stats.wilcoxon); Holm-corrected over the comparisons"}
