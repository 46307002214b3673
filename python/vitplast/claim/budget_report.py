"""The figure of the selection at equal budget (`.budgets`; its table is `.report.budget_lines`):
``OUT/budgets.png`` (relative gain against budget: one line per criterion, its points side by side at
each budget so that criteria picking the same set stay visible, the random sets as a band from their
minimum to their maximum with their median dashed, full finetuning as a horizontal line),
drawn in the commands' one plotting style (`vitplast.outputs.plots`)."""

from __future__ import annotations

from pathlib import Path

from ..outputs.plots import figure, legend_outside, save
from .records import Budgets, ClaimAnalysis
from .report import nan

RULE_COLOR, BAND_COLOR, FULL_COLOR = "0.25", "0.6", "#637939"
DODGE = 0.03  # criteria at one budget drawn this share of the budgets' spacing apart


def plot_budgets(an: ClaimAnalysis, path) -> Path:
    """Relative gain against budget -> PNG at ``path`` (an empty panel saying so without budgets)."""
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
        pts = [(r.budget + shift, r.relative_gain) for r in budgets.rows
               if r.criterion == name and r.relative_gain is not None]
        if pts:
            style = {"color": RULE_COLOR, "marker": "s"} if name == "attention" else {"marker": "o"}
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", label=name, **style)
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
    return save(fig, path)
