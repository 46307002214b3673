"""The figure of `vitplast claim`, one for both granularities: gain against plasticity (one point per
unit coloured by its component, 95% error bars both ways and the Theil-Sen trend), plasticity per layer
and, for (component, layer) units, the gain per layer.

Drawn on a bare ``matplotlib.figure.Figure`` with the Agg canvas (no pyplot, so no global figure state is
created or left behind), with each component in its one colour (`vitplast.outputs.plots.component_color`),
and written atomically. Gains get error bars only where there are at least two seeds.

The figure of the selection at equal budget (`budgets_figure`; `.budgets`; its table is
`.report.budget_lines`):
``OUT/budgets.png`` (relative gain against budget: one line per criterion, its points side by side at
each budget so that criteria picking the same set stay visible, the random sets as a band from their
minimum to their maximum with their median dashed, full finetuning as a horizontal line),
drawn in the commands' one plotting style (`vitplast.outputs.plots`). The aggregate's figure over several
datasets is here too (`aggregate_figure`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..finetune.selection import TRAIN_ORDER
from ..outputs.plots import DPI, component_color, figure, legend_outside, save
from .aggregate import Aggregate, strata_noun
from .budgets import LORA
from .records import Budgets, ClaimAnalysis, Setup
from .report import _ci, nan, num


def error_bars(v: float, ci) -> list | None:
    lo, hi = ci
    return None if lo is None or hi is None else [[max(0.0, v - lo)], [max(0.0, hi - v)]]


def claim_figure(an: ClaimAnalysis, setup: Setup):
    """Gain against plasticity (one point per unit coloured by component, 95% error bars both ways,
    Theil-Sen trend), plasticity per layer (mean and 95% band per component) and, for (component, layer)
    units, the gain per layer -> the figure (`plot_claim`: a PNG at ``path``)."""
    per_layer = any(r.layer_index is not None for r in an.rows)
    fig, axes = figure(3 if per_layer else 2, 1, (8, 13 if per_layer else 9))
    ax, ax_p = axes[0, 0], axes[1, 0]
    seen: set[str] = set()
    points = [r for r in an.rows if r.plasticity is not None and r.best_lr_gain.mean is not None]
    for r in points:
        x, y = r.plasticity, r.best_lr_gain.mean
        ax.errorbar([x], [y], xerr=error_bars(x, r.plasticity_ci), yerr=error_bars(y, r.best_lr_gain.ci),
                    fmt="o", color=component_color(r.component), capsize=2, ms=6, alpha=0.85,
                    label=None if r.component in seen else f"{r.component} ({r.trainable_params:,} params)")
        seen.add(r.component)
        ax.annotate(r.unit if r.layer is None else str(r.layer), (x, y), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    slope, intercept, xs = an.trend.slope, an.trend.intercept, [r.plasticity for r in points]
    if slope is not None and intercept is not None and xs:
        pad = 0.05 * (max(xs) - min(xs) or 1.0)
        x0, x1 = min(xs) - pad, max(xs) + pad
        ax.plot([x0, x1], [slope * x0 + intercept, slope * x1 + intercept], "--", color="0.4",
                label=f"Theil-Sen trend (slope {slope:+.3g})")
    ax.axhline(0.0, color="0.75", lw=0.8)
    sp, kd, w = an.correlations.spearman, an.correlations.kendall, an.within_type
    within = "" if w is None else (f"\nwithin types {num(w.pooled_spearman, '+.2f')} "
                                   f"(p {num(w.stratified_p_greater, '.2g')})")
    ax.set_title(f"Spearman ρ = {num(sp.value, '+.2f')} {_ci(sp.ci, '+.2f')}, p = "
                 f"{num(sp.p_greater, '.2g')};  "
                 f"Kendall τ = {num(kd.value, '+.2f')}, p = {num(kd.p_greater, '.2g')}{within}", fontsize=10)
    base = "head-only run" if an.baseline.train == "head" else "before finetuning"
    ax.set_xlabel(f"plasticity before finetuning ({setup.protocol}, 95% bootstrap CI)"
                  + ("; labels: layer" if per_layer else ""))
    # what the gain's error bars are: the 95% t interval over seeds, or none with a single seed
    bars = "95% t CI over seeds" if len(setup.seed) >= 2 else "n = 1 seed: no interval"
    ax.set_ylabel(f"accuracy gain over {base} ({bars})")
    title = "plasticity per layer" + ("" if per_layer else " (per layer the claim is plasticity-only)")
    panels = [(ax_p, _plasticity_series(an), "plasticity (95% CI)", 1.0, title)]
    if per_layer:
        panels.append((axes[2, 0], _gain_series(an), "accuracy gain over head-only (95% CI)", 0.0,
                       "accuracy gain per layer (each unit trained alone)"))
    for axis, series, label, level, title in panels:
        for c, (xs, mean, lo, hi) in series.items():
            axis.plot(xs, mean, "o-", color=component_color(c), label=c)
            axis.fill_between(xs, lo, hi, color=component_color(c), alpha=0.2)
        axis.axhline(level, color="0.75", lw=0.8)
        axis.set_xticks(range(len(an.layers)), an.layers)
        axis.set_xlabel("layer (block)")
        axis.set_ylabel(label)
        axis.set_title(title, fontsize=10)
    for axis in axes[:, 0]:
        legend_outside(axis)
        axis.grid(alpha=0.3)
    return fig


def _by_component(an: ClaimAnalysis) -> Iterator[tuple[str, list]]:
    """Each ranked component (those of `TRAIN_ORDER` first) with its rows in layer order."""
    names = list(dict.fromkeys(r.component for r in an.rows))
    for c in [c for c in TRAIN_ORDER if c in names] + [c for c in names if c not in TRAIN_ORDER]:
        yield c, sorted((r for r in an.rows if r.component == c), key=lambda r: nan(r.layer_index))


def _plasticity_series(an: ClaimAnalysis) -> dict[str, tuple]:
    """``{component: (layer indexes, mean, lo, hi)}`` of plasticity per layer: whole components' own
    per-layer values, or the layer units' of each component, and the components measured but not
    ranked."""
    out = {}
    for c, rows in _by_component(an):
        if rows[0].plasticity_per_layer is not None:
            out[c] = _series(range(len(an.layers)), rows[0].plasticity_per_layer,
                             rows[0].plasticity_per_layer_ci)
        else:
            out[c] = _series([r.layer_index for r in rows], [r.plasticity for r in rows],
                             [r.plasticity_ci for r in rows])
    out.update({c: _series(range(len(an.layers)), v.per_layer, v.per_layer_ci)
                for c, v in an.other_measured.items()})
    return out


def _gain_series(an: ClaimAnalysis) -> dict[str, tuple]:
    """``{component: (layer indexes, mean, lo, hi)}`` of the layer units' gains."""
    return {c: _series([r.layer_index for r in rows], [r.best_lr_gain.mean for r in rows],
                       [r.best_lr_gain.ci for r in rows]) for c, rows in _by_component(an)}


def _series(xs, mean, ci) -> tuple:
    return list(xs), [nan(v) for v in mean], [nan(v[0]) for v in ci], [nan(v[1]) for v in ci]


# LoRA in a colour no criterion takes (they take the first colours of the cycle)
RULE_COLOR, BAND_COLOR, FULL_COLOR, LORA_COLOR = "0.25", "0.6", "#637939", "#17becf"
STYLES = {"attention": {"color": RULE_COLOR, "marker": "s"}, LORA: {"color": LORA_COLOR, "marker": "D"}}
DODGE = 0.03  # criteria at one budget drawn this share of the budgets' spacing apart


def budgets_figure(an: ClaimAnalysis):
    """Relative gain against budget -> the figure (an empty panel saying so without budgets), written by
    `save_figures`."""
    budgets = an.budgets or Budgets("components", [], [], None, "")
    fig, axes = figure(1, 1, (8, 4.8))
    ax = axes[0, 0]
    xs = [b.budget for b in budgets.budgets]
    lo, hi, median = ([nan(getattr(b.random_relative_gain, k)) for b in budgets.budgets]
                      for k in ("min", "max", "median"))
    if xs:
        ax.vlines(xs, lo, hi, color=BAND_COLOR, lw=6, alpha=0.35)
        ax.fill_between(xs, lo, hi, color=BAND_COLOR, alpha=0.3, label="random sets (min-max)", step=None)
        ax.plot(xs, median, "--", color=BAND_COLOR, marker="_", ms=14, label="random sets (median)")
    criteria = list(dict.fromkeys(r.criterion for r in budgets.rows))
    spacing = min(b - a for a, b in zip(xs, xs[1:], strict=False)) if len(xs) > 1 else 1
    for i, name in enumerate(criteria):
        shift = (i - (len(criteria) - 1) / 2) * DODGE * spacing  # criteria picking one set side by side
        rows = [r for r in budgets.rows if r.criterion == name and r.relative_gain is not None]
        if rows:
            ax.plot([r.budget + shift for r in rows], [r.relative_gain for r in rows], "-", label=name,
                    **STYLES.get(name, {"marker": "o"}))
        if name == LORA:  # its rank and real parameter count beside each point
            for r in rows:
                ax.annotate(f"{r.train.partition(':')[2]}, {r.trainable_params or 0:,} params",
                            (r.budget + shift, r.relative_gain), textcoords="offset points", xytext=(6, -10),
                            fontsize=7, color=LORA_COLOR)
    if budgets.full is not None and budgets.full.relative_gain is not None:
        ax.axhline(budgets.full.relative_gain, color=FULL_COLOR, lw=1.2, label="full finetuning")
    if not xs:
        ax.text(0.5, 0.5, "no budget", transform=ax.transAxes, ha="center")
    besides = " besides the head" if budgets.unit == "parameters" else ", head always trained"
    ax.set_xlabel(f"budget ({budgets.unit}{besides})")
    ax.set_ylabel("relative gain over linear probing")
    ax.set_title("selection at equal budget: each criterion's set against random sets", fontsize=10)
    if xs:
        ax.set_xticks(xs)
        ax.set_xlim(xs[0] - spacing / 2, xs[-1] + spacing / 2)
        legend_outside(ax)
    ax.grid(alpha=0.3)
    return fig


def plot_claim(an: ClaimAnalysis, setup: Setup, path) -> Path:
    """The claim's figure (`claim_figure`) as a PNG at ``path``."""
    return save(claim_figure(an, setup), path, dpi=100)


def claim_figures(datasets: Iterable[tuple], agg: Aggregate | None, out: Path) -> Iterator[tuple]:
    """``(figure, path, dpi)`` of each dataset's figures in its folder (``datasets``: ``(analysis, setup,
    folder)``): ``claim.png`` (`claim_figure`) and ``budgets.png`` (`budgets_figure`), then with ``agg``
    (several datasets) the aggregate's, ``out/aggregate.png`` (`aggregate_figure`), each drawn when asked
    for."""
    for an, setup, folder in datasets:
        yield claim_figure(an, setup), folder / "claim.png", 100
        yield budgets_figure(an), folder / "budgets.png", DPI
    if agg is not None:
        yield aggregate_figure(agg), out / "aggregate.png", DPI


def save_figures(figures: Iterable[tuple]) -> None:
    """Writes each ``(figure, path, dpi)`` of ``figures`` (`vitplast.outputs.plots.save`: atomically)."""
    for fig, path, dpi in figures:
        save(fig, path, dpi=dpi)


def aggregate_figure(agg: Aggregate):
    """The aggregate's figure: one panel per dataset, gain against plasticity (95% error bars where
    defined), its rho in the title."""
    n = len(agg.datasets)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = figure(rows, cols, (4.6 * cols, 3.8 * rows))
    for k, (name, d) in enumerate(agg.datasets.items()):
        ax = axes[k // cols][k % cols]
        for p in d.points:
            if p.plasticity is None or p.best_lr_gain is None:
                continue
            ax.errorbar([p.plasticity], [p.best_lr_gain], xerr=error_bars(p.plasticity, p.plasticity_ci),
                        yerr=error_bars(p.best_lr_gain, p.best_lr_gain_ci), fmt="o", capsize=2, ms=5,
                        color=component_color(p.component))
            ax.annotate(p.name, (p.plasticity, p.best_lr_gain), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
        ax.set_title(f"{name}: rho = {num(d.spearman.value, '+.2f')}, p = {num(d.spearman.p_greater, '.2g')}",
                     fontsize=9)
        ax.axhline(0.0, color="0.75", lw=0.8)
        ax.set_xlabel("plasticity before finetuning")
        ax.set_ylabel("accuracy gain")
        ax.grid(alpha=0.3)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].set_axis_off()
    fig.suptitle(f"pooled rho within {strata_noun(agg)} = {num(agg.pooled.spearman, '+.2f')}, stratified p = "
                 f"{num(agg.pooled.p_greater, '.2g')}", fontsize=10)
    return fig
