"""Figures of a finetuning run or grid (`vitplast.outputs.plots`: PNG files written atomically, one colour per
component label in every figure).

- `plot_curves` — one run: per-step plasticity per component (mean over layers) and gradient norm per
  component, from its ``metrics.jsonl`` records, plus loss and validation accuracy (points when there are
  few); for a monitored run, also `plot_step_heatmaps` beside it;
- `plot_step_heatmaps` — one run: per component, plasticity per layer (rows) at every monitored step
  (columns), on one colour scale centred at 1;
- `plot_grid` — a grid: accuracy per trained component (mean, with the std over seeds where there are at least
  two seeds: ``n = 1`` is written instead of a bar of zero height), and plasticity at the start vs accuracy
  gain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..outputs.plots import component_color, figure, layer_ticks, legend_outside, log_axis, save
from .selection import TRAIN_ORDER

STEP_HEATMAP = "plasticity_steps.png"  # written beside curves.png for a monitored run
FEW_POINTS = 5  # fewer validation points than this are drawn as points, not joined by lines


def _groups(records: Sequence[dict], field: str) -> list[str]:
    seen = {g for r in records for g in r.get(field, {})}
    order = list(TRAIN_ORDER) + ["head", "other"]
    return [g for g in order if g in seen] + sorted(seen - set(order))


def _per_group(ax, mon: Sequence[dict], field: str) -> None:
    for g in _groups(mon, field):
        pts = [(r["step"], r[field][g]) for r in mon if g in r[field]]
        ax.plot(*zip(*pts, strict=True), marker=".", color=component_color(g), label=g)


def plot_curves(records: Sequence[dict], path, *, title: str = "") -> Path:
    """Per-step curves of one run from its metrics records -> PNG at ``path``; a monitored run's steps x layer
    heatmaps go beside it (`STEP_HEATMAP`)."""
    mon = [r for r in records if r.get("kind") == "monitor"]
    evals = [r for r in records if r.get("kind") == "eval"]
    train = [r for r in records if r.get("kind") in ("monitor", "train")]
    fig, ax = figure(1, 3, (17, 4))
    _per_group(ax[0, 0], mon, "plasticity_mean")
    ax[0, 0].set(xlabel="step", ylabel="plasticity (mean over layers)", title="plasticity")
    _per_group(ax[0, 1], mon, "grad_norm")
    ax[0, 1].set(xlabel="step", ylabel="gradient norm", title="gradient norm per component")
    if any(r["grad_norm"] for r in mon):
        log_axis(ax[0, 1])
    if train:
        ax[0, 2].plot([r["step"] for r in train], [r["loss"] for r in train], color="0.3", lw=1,
                      label="train loss")
    ax[0, 2].set(xlabel="step", ylabel="training loss", title="loss and validation accuracy")
    if evals:
        acc_ax = ax[0, 2].twinx()
        acc_ax.plot([r["step"] for r in evals], [r["acc"] for r in evals],
                    "o" if len(evals) < FEW_POINTS else "o-", color="#2ca02c", ms=6, label="val accuracy")
        acc_ax.set(ylabel="validation accuracy", ylim=(0, 1))
        lines = ax[0, 2].get_legend_handles_labels()[0] + acc_ax.get_legend_handles_labels()[0]
        legend_outside(ax[0, 2], lines, bbox_to_anchor=(1.16, 1.0))  # right of the accuracy axis
        acc_ax.grid(False)
    elif train:
        legend_outside(ax[0, 2])
    if ax[0, 0].get_legend_handles_labels()[0]:  # one legend for both component panels
        legend_outside(ax[0, 1], *ax[0, 0].get_legend_handles_labels())
    if title:
        fig.suptitle(title)
    out = save(fig, path)
    if any(r.get("plasticity") for r in mon):
        plot_step_heatmaps(mon, Path(path).with_name(STEP_HEATMAP), title=title)
    return out


def plot_step_heatmaps(records: Sequence[dict], path, *, title: str = "") -> Path:
    """Per component, plasticity per layer (rows, layer 0 on top) at each monitored step (columns) from a
    run's monitor records -> PNG at ``path``; one colour scale for all, centred at 1."""
    from matplotlib.colors import TwoSlopeNorm

    mon = sorted((r for r in records if r.get("kind") == "monitor" and r.get("plasticity")),
                 key=lambda r: r["step"])
    comps = _groups(mon, "plasticity")
    grids = {c: [[v if v is not None else math.nan for v in r["plasticity"].get(c, [])] for r in mon]
             for c in comps}
    values = [v for g in grids.values() for row in g for v in row if math.isfinite(v)]
    low, high = min([*values, 0.999]), max([*values, 1.001])
    steps = [r["step"] for r in mon]
    fig, ax = figure(1, len(comps), (max(6.0, 2.4 * len(comps) + 1.2), 3.4), sharey=True)
    fig.set_layout_engine("constrained")
    image = None
    ticks = sorted({0, len(steps) - 1, *(round(k * (len(steps) - 1) / 3) for k in (1, 2))})
    for a, c in zip(ax[0], comps, strict=True):
        layers = max(len(row) for row in grids[c])
        cells = [[row[l] if l < len(row) else math.nan for row in grids[c]] for l in range(layers)]
        image = a.imshow(cells, cmap="RdBu_r", norm=TwoSlopeNorm(vmin=low, vcenter=1.0, vmax=high),
                         aspect="auto", interpolation="nearest")
        a.set_xticks(ticks, [str(steps[i]) for i in ticks])
        layer_ticks(a, [str(l) for l in range(layers)], axis="y", max_ticks=32)
        a.set_xlabel("step")
        a.set_title(c, color=component_color(c), fontweight="bold")
    ax[0, 0].set_ylabel("layer")
    fig.colorbar(image, ax=list(ax[0]), shrink=0.9, label="plasticity (1 = distances kept)")
    fig.suptitle(f"plasticity per layer during training{': ' + title if title else ''}", fontsize=10)
    return save(fig, path, tight=False)


def seed_note(rows: Sequence[dict]) -> tuple[str, bool]:
    """What the error bars are, and whether single-seed rows need their own ``n = 1`` mark (a grid mixing one
    and several seeds)."""
    ns = {r["n"] for r in rows}
    if ns and max(ns) < 2:
        return "one seed: no error bars", False
    return "mean ± std over seeds", min(ns, default=2) < 2


def plot_grid(rows: Sequence[dict], folder) -> list[Path]:
    """Grid figures from `vitplast.finetune.aggregate` rows -> PNGs in ``folder``."""
    folder = Path(folder)
    out = []
    one_lr = len({x["lr"] for x in rows}) == 1
    note, mark = seed_note(rows)
    fig, ax = figure(1, 1, (max(5, 1.1 * len(rows) + 2), 4))
    xs = range(len(rows))
    ax[0, 0].bar(xs, [r["acc_mean"] for r in rows], color=[component_color(r["train"]) for r in rows])
    spread = [(i, r) for i, r in enumerate(rows) if r["n"] >= 2]
    if spread:
        ax[0, 0].errorbar([i for i, _ in spread], [r["acc_mean"] for _, r in spread],
                          yerr=[r["acc_std"] for _, r in spread], fmt="none", ecolor="black", capsize=4)
    for i, r in enumerate(rows):
        if mark and r["n"] < 2:
            ax[0, 0].annotate("n = 1", (i, r["acc_mean"]), textcoords="offset points", xytext=(0, 3),
                              ha="center", fontsize=8)
    ax[0, 0].set_xticks(list(xs), [r["train"] if one_lr else f"{r['train']}\nlr={r['lr']:g}" for r in rows])
    ax[0, 0].set(ylabel=f"validation accuracy ({note})", title="accuracy per trained component")
    ax[0, 0].axhline(rows[0]["initial_acc"] if rows else 0, color="grey", ls="--", lw=1, label="before")
    legend_outside(ax[0, 0])
    out.append(save(fig, folder / "accuracy_per_component.png"))

    pts = [r for r in rows if "plasticity" in r]
    fig, ax = figure(1, 1, (6, 4.5))
    for r in pts:
        ax[0, 0].errorbar(r["plasticity"], r["gain_at_lr"], yerr=r["acc_std"] if r["n"] >= 2 else None,
                          fmt="o", color=component_color(r["train"]), capsize=3, ms=7)
        label = r["train"] + (" (n = 1)" if mark and r["n"] < 2 else "")
        ax[0, 0].annotate(label, (r["plasticity"], r["gain_at_lr"]), textcoords="offset points",
                          xytext=(5, 5), color=component_color(r["train"]), fontsize=9)
    ax[0, 0].margins(x=0.15, y=0.15)
    over = rows[0]["gain_at_lr_over"] if rows else "initial"
    ax[0, 0].set(xlabel="plasticity before finetuning", title=f"plasticity vs accuracy gain ({note})",
                 ylabel=f"accuracy gain over {'linear probing' if over == 'head' else 'start'}")
    ax[0, 0].grid(alpha=0.3)
    out.append(save(fig, folder / "plasticity_vs_gain.png"))
    return out
