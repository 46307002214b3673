"""The figure of the selection at equal budget (`.budgets`; its table is `.report.budget_lines`):
``OUT/budgets.png`` (relative gain against budget: one line per criterion, its points side by side at
each budget so that criteria picking the same set stay visible, the random sets as a band from their
minimum to their maximum with their median dashed, full finetuning as a horizontal line),
drawn in the commands' one plotting style (`vitplast.outputs.plots`)."""

from __future__ import annotations

import math
from pathlib import Path

from ..outputs.plots import figure, legend_outside, save

RULE_COLOR, BAND_COLOR, FULL_COLOR = "0.25", "0.6", "#637939"
DODGE = 0.03  # criteria at one budget drawn this share of the budgets' spacing apart


def plot_budgets(result: dict, path) -> Path:
    """Relative gain against budget -> PNG at ``path`` (an empty panel saying so without budgets)."""
    budgets = result["analysis"].get("budgets") or {}
    fig, axes = figure(1, 1, (8, 4.8))
    ax = axes[0, 0]
    spread = budgets.get("budgets") or []
    xs = [b["budget"] for b in spread]
    band = [(b["random_relative_gain"]["min"], b["random_relative_gain"]["max"],
             b["random_relative_gain"]["median"]) for b in spread]
    if xs:
        ax.vlines(xs, [_nan(v[0]) for v in band], [_nan(v[1]) for v in band], color=BAND_COLOR, lw=6,
                  alpha=0.35)
        ax.fill_between(xs, [_nan(v[0]) for v in band], [_nan(v[1]) for v in band], color=BAND_COLOR,
                        alpha=0.3, label="random sets (min-max)", step=None)
        ax.plot(xs, [_nan(v[2]) for v in band], "--", color=BAND_COLOR, marker="_", ms=14,
                label="random sets (median)")
    criteria = _by_criterion(budgets.get("rows") or [])
    spacing = min(b - a for a, b in zip(xs, xs[1:], strict=False)) if len(xs) > 1 else 1
    step = DODGE * spacing
    for i, (name, rows) in enumerate(criteria.items()):
        shift = (i - (len(criteria) - 1) / 2) * step  # side by side: criteria picking one set overlap
        pts = [(r["budget"] + shift, r["relative_gain"]) for r in rows if r["relative_gain"] is not None]
        if pts:
            style = {"color": RULE_COLOR, "marker": "s"} if name == "attention" else {"marker": "o"}
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", label=name, **style)
    full = (budgets.get("full") or {}).get("relative_gain")
    if full is not None:
        ax.axhline(full, color=FULL_COLOR, lw=1.2, label="full finetuning")
    if not xs:
        ax.text(0.5, 0.5, "no budget", transform=ax.transAxes, ha="center")
    unit = budgets.get("unit", "components")
    besides = " besides the head" if unit == "parameters" else ", head always trained"
    ax.set_xlabel(f"budget ({unit}{besides})")
    ax.set_ylabel("relative gain over linear probing")
    ax.set_title("selection at equal budget: each criterion's set against random sets", fontsize=10)
    if xs:
        ax.set_xticks(xs)
        ax.set_xlim(xs[0] - spacing / 2, xs[-1] + spacing / 2)
        legend_outside(ax)
    ax.grid(alpha=0.3)
    return save(fig, path)


def _by_criterion(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["criterion"], []).append(r)
    return out


def _nan(v):
    return math.nan if v is None else v
