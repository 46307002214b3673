"""The claim over several datasets: each dataset's own analysis (its rank correlations, as one claim
reports them), then what they say together.

- per dataset: Spearman's rho and Kendall's tau-b between plasticity and gain, their bootstrap
  intervals and one-sided permutation p-values (from that dataset's analysis);
- pooled: the within-dataset Spearman, each dataset's rho weighted by its number of components (or
  units), tested by a **stratified** permutation test that permutes the gains only among the rows of
  the same dataset (`vitplast.claim.statistics.stratified_permutation_test`: what differs
  between datasets, their accuracy level, cannot make p small);
- combined: the per-dataset one-sided p-values combined by Stouffer's method weighted by the square
  root of each dataset's number of rows (``scipy.stats.combine_pvalues``), and how many datasets
  have rho > 0;
- a figure with one panel per dataset: gain against plasticity, with the rho of each.

Rows whose plasticity or gain is undefined are left out of the pooled test (and counted).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats

from ..outputs.plots import component_color, figure, save
from .paired import paired_tests
from .statistics import stratified_permutation_test


def _finite(v) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def _points(an: dict) -> list[dict]:
    """``{"name", "component", "plasticity", "accuracy_gain", "accuracy_gain_ci"}`` of every row of one
    analysis."""
    key = "unit" if an.get("granularity") == "layer" else "component"
    return [{"name": r[key], "component": r["component"], "plasticity": r["plasticity"],
             "plasticity_ci": r["plasticity_ci"], "accuracy_gain": r["accuracy_gain"]["mean"],
             "accuracy_gain_ci": r["accuracy_gain"]["ci"]}
            for r in an["rows"]]


def aggregate_claims(results: dict[str, dict], *, permutations: int = 10000, seed: int = 0) -> dict:
    """The aggregate of per-dataset claim results (``{name: result}``, each with ``"config"`` and
    ``"analysis"``): per-dataset correlations, the pooled stratified test, the combined p-value."""
    per, xs, ys, strata, left_out = {}, [], [], [], 0
    for name, res in results.items():
        an = res["analysis"]
        points = _points(an)
        sp, kd = an["correlations"]["spearman"], an["correlations"]["kendall"]
        per[name] = {"data": res["config"]["data"], "rows": len(points),
                     "spearman": {k: sp[k] for k in ("value", "ci", "p_greater")},
                     "kendall": {k: kd[k] for k in ("value", "ci", "p_greater")},
                     "ranking": an.get("ranking"), "points": points}
        for p in points:
            if p["plasticity"] is None or p["accuracy_gain"] is None:
                left_out += 1
                continue
            xs.append(p["plasticity"])
            ys.append(p["accuracy_gain"])
            strata.append(name)
    pooled = stratified_permutation_test(np.array(xs), np.array(ys), np.array(strata),
                                         permutations=permutations, seed=seed) if xs else None
    return {"datasets": per, "pooled": _pooled(pooled, left_out), "combined": _combined(per),
            "mha_tests": _mha_tests(results)}


def _mha_tests(results: dict[str, dict]) -> dict | None:
    """MHA against each other component over the (dataset, seed) pairs of the component claims: each
    component's accuracy at its best lr, paired by dataset and seed (`paired_tests`, Holm-corrected)."""
    pairs: dict[str, list[float]] = {}
    for res in results.values():
        an = res["analysis"]
        if an.get("granularity") == "layer":
            return None
        rows = {r["component"]: r.get("accuracy_per_seed") for r in an["rows"]}
        if "MHA" not in rows or any(v is None for v in rows.values()):
            return None
        for c, v in rows.items():
            pairs.setdefault(c, []).extend(v)
    if "MHA" not in pairs or len({len(v) for v in pairs.values()}) != 1:
        return None
    return paired_tests("MHA", pairs)


def _pooled(test: dict | None, left_out: int) -> dict:
    if test is None:
        return {"spearman": None, "p_greater": None, "p_two_sided": None, "left_out": left_out}
    return {"spearman": _finite(test["observed"]), "p_greater": _finite(test["greater"]),
            "p_two_sided": _finite(test["two_sided"]), "exact": test["exact"],
            "permutations": test["permutations"], "strata": test["strata"], "left_out": left_out}


def _combined(per: dict) -> dict:
    """Stouffer's combination of the datasets' one-sided p-values (weights sqrt(rows))."""
    ps = [(d["spearman"]["p_greater"], d["rows"]) for d in per.values()
          if d["spearman"]["p_greater"] is not None]
    rhos = [d["spearman"]["value"] for d in per.values() if d["spearman"]["value"] is not None]
    out = {"datasets_rho_positive": sum(r > 0 for r in rhos), "datasets_rho_defined": len(rhos),
           "method": "stouffer", "p_greater": None}
    if ps:
        p = np.clip([v for v, _ in ps], 1e-300, 1 - 1e-12)  # Stouffer needs 0 < p < 1
        res = stats.combine_pvalues(p, method="stouffer", weights=np.sqrt([n for _, n in ps]))
        out["p_greater"] = _finite(float(res.pvalue))
    return out


def _num(v, fmt: str) -> str:
    return "nan" if v is None or not math.isfinite(v) else format(v, fmt)


def aggregate_verdict(agg: dict) -> str:
    """One sentence on what the datasets together support."""
    pooled, comb = agg["pooled"], agg["combined"]
    rho, p = pooled["spearman"], pooled["p_greater"]
    n = len(agg["datasets"])
    pos = f"rho > 0 on {comb['datasets_rho_positive']} of {n} datasets"
    if rho is None or p is None:
        return f"undefined: plasticity or gain is constant within every dataset ({pos})"
    how = "supported" if p < 0.05 and rho > 0 else "not established"
    return f"{how} across datasets: pooled within-dataset rho = {rho:+.2f}, stratified p = {p:.3g}; {pos}"


def format_aggregate(agg: dict) -> str:
    """The aggregate as plain text: one line per dataset, then the pooled and combined tests."""
    n = len(agg["datasets"])
    lines = [f"Does plasticity before finetuning predict the accuracy gain, across {n} datasets?", "",
             f"{'dataset':<24} {'data':<28} {'rows':>4}  {'Spearman rho [95% CI]':<24} {'p':>8}  "
             f"{'Kendall tau-b':>13}"]
    lines.append("-" * len(lines[-1]))
    for name, d in agg["datasets"].items():
        sp, kd = d["spearman"], d["kendall"]
        ci = f"[{_num(sp['ci'][0], '+.2f')}, {_num(sp['ci'][1], '+.2f')}]"
        rho = f"{_num(sp['value'], '+.3f')} {ci}"
        p = _num(sp["p_greater"], ".3g")
        tau = _num(kd["value"], "+.3f")
        lines.append(f"{name:<24} {d['data']:<28} {d['rows']:>4}  {rho:<24} {p:>8}  {tau:>13}")
    pooled, comb = agg["pooled"], agg["combined"]
    kind = ("exact" if pooled.get("exact") else f"{pooled.get('permutations')} random permutations"
            if pooled.get("exact") is False else "undefined")
    lines += [
        "",
        f"pooled within datasets: Spearman {_num(pooled['spearman'], '+.3f')}, stratified permutation "
        f"p = {_num(pooled['p_greater'], '.3g')} (one-sided), {_num(pooled['p_two_sided'], '.3g')} "
        f"(two-sided; gains permuted within each dataset, {kind})",
        f"combined per-dataset p (Stouffer, weights sqrt(rows)): {_num(comb['p_greater'], '.3g')}; rho > 0 "
        f"on {comb['datasets_rho_positive']} of {comb['datasets_rho_defined']} datasets where it is defined",
    ]
    if pooled.get("left_out"):
        lines.append(f"({pooled['left_out']} rows with an undefined plasticity or gain left out of the "
                     "pooled test)")
    if agg.get("mha_tests"):
        from .report import mha_test_lines

        lines += mha_test_lines(agg["mha_tests"])
    lines.append(f"verdict: {aggregate_verdict(agg)}")
    return "\n".join(lines)


def plot_aggregate(agg: dict, path) -> Path:
    """One panel per dataset: gain against plasticity (95% error bars where defined), its rho in the
    title -> PNG at ``path``."""
    n = len(agg["datasets"])
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = figure(rows, cols, (4.6 * cols, 3.8 * rows))
    for k, (name, d) in enumerate(agg["datasets"].items()):
        ax = axes[k // cols][k % cols]
        for p in d["points"]:
            if p["plasticity"] is None or p["accuracy_gain"] is None:
                continue
            xerr = _err(p["plasticity"], p["plasticity_ci"])
            yerr = _err(p["accuracy_gain"], p["accuracy_gain_ci"])
            ax.errorbar([p["plasticity"]], [p["accuracy_gain"]], xerr=xerr, yerr=yerr, fmt="o", capsize=2,
                        ms=5,
                        color=component_color(p["component"]))
            ax.annotate(p["name"], (p["plasticity"], p["accuracy_gain"]), textcoords="offset points",
                        xytext=(4, 4),
                        fontsize=8)
        sp = d["spearman"]
        ax.set_title(f"{name}: rho = {_num(sp['value'], '+.2f')}, p = {_num(sp['p_greater'], '.2g')}",
                     fontsize=9)
        ax.axhline(0.0, color="0.75", lw=0.8)
        ax.set_xlabel("plasticity before finetuning")
        ax.set_ylabel("accuracy gain")
        ax.grid(alpha=0.3)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].set_axis_off()
    pooled = agg["pooled"]
    fig.suptitle(f"pooled within-dataset rho = {_num(pooled['spearman'], '+.2f')}, stratified p = "
                 f"{_num(pooled['p_greater'], '.2g')}", fontsize=10)
    return save(fig, path)


def _err(v: float, ci) -> list | None:
    lo, hi = ci
    if lo is None or hi is None:
        return None
    return [[max(0.0, v - lo)], [max(0.0, hi - v)]]
