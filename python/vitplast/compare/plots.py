"""The figure of ``vitplast compare``: per component its one colour (`vitplast.outputs.plots.
component_color`), per run one line style and marker. The first panel holds each run's mean over layers
with its 95% CI; then one panel per component: the per-layer means with their 95% CI bands."""

from __future__ import annotations

import math
from pathlib import Path

from ..outputs.plots import component_color, figure, legend_outside, save
from .table import Comparison

STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")


def _style(run: int) -> tuple[str, str]:
    return STYLES[run % len(STYLES)], MARKERS[run % len(MARKERS)]


def _summary(ax, cmp: Comparison) -> None:
    from matplotlib.lines import Line2D

    width = 0.7 / len(cmp.runs)
    for r in range(len(cmp.runs)):
        for i, c in enumerate(cmp.components):
            e = cmp.overall[c][r]
            if not math.isfinite(e.mean):
                continue
            lo, hi = e.ci
            err = [[e.mean - lo], [hi - e.mean]] if math.isfinite(lo) else None
            ax.errorbar([i - 0.35 + width * (r + 0.5)], [e.mean], yerr=err, fmt=_style(r)[1],
                        color=component_color(c), capsize=3, ms=6, mfc="white" if r else component_color(c))
    ax.set_xticks(range(len(cmp.components)), cmp.components)
    for tick, c in zip(ax.get_xticklabels(), cmp.components, strict=True):
        tick.set_color(component_color(c))
    ax.axhline(1.0, color="0.7", lw=0.8, ls="--")
    ax.set_ylabel("plasticity, mean over layers (95% CI)")
    ax.set_title("each run (first filled)", fontsize=10)
    handles = [Line2D([], [], color="0.2", ls=_style(r)[0], marker=_style(r)[1], label=label,
                      mfc="white" if r else "0.2") for r, label in enumerate(cmp.labels)]
    legend_outside(ax, handles, title="run", title_fontsize=8)


def _per_layer(ax, cmp: Comparison, c: str) -> None:
    xs = list(range(len(cmp.layers)))
    color = component_color(c)
    for r, layers in enumerate(cmp.per_layer[c]):
        ls, marker = _style(r)
        ax.plot(xs, [e.mean for e in layers], ls=ls, marker=marker, ms=4, color=color, label=cmp.labels[r])
        ax.fill_between(xs, [e.ci[0] for e in layers], [e.ci[1] for e in layers], color=color, alpha=0.15)
    ax.axhline(1.0, color="0.7", lw=0.8, ls="--")
    step = max(1, math.ceil(len(xs) / 12))
    ax.set_xticks(xs[::step], list(cmp.layers)[::step])
    ax.set_xlabel("layer")
    ax.set_title(c, color=color, fontweight="bold")


def plot_comparison(cmp: Comparison, path) -> Path:
    """The comparison figure -> PNG at ``path``."""
    panels = 1 + len(cmp.components)
    cols = min(3, panels)
    rows = math.ceil(panels / cols)
    fig, axes = figure(rows, cols, (4.6 * cols, 3.6 * rows))
    flat = list(axes.flat)
    _summary(flat[0], cmp)
    for ax, c in zip(flat[1:], cmp.components, strict=False):
        _per_layer(ax, cmp, c)
    for i in range(cols, panels, cols):  # the first column below the summary
        flat[i].set_ylabel("plasticity (95% CI)")
    for ax in flat[panels:]:
        ax.set_axis_off()
    fig.suptitle(f"plasticity: {' vs '.join(cmp.labels)}", fontsize=11)
    return save(fig, path)
