"""Figures of a finetuning run or grid (:mod:`vitplast.outputs.plots`: PNG files written atomically).

- :func:`plot_curves` — one run: per-step plasticity per component (mean over layers) and gradient
  norm per component, from its ``metrics.jsonl`` records, plus loss and validation accuracy;
- :func:`plot_grid` — a grid: accuracy (mean +- std over seeds) per trained component, and
  plasticity at the start vs accuracy gain (the paper's claim: the more plastic, the larger the gain).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..outputs.plots import figure, save
from .selection import TRAIN_ORDER


def _groups(records: Sequence[dict], field: str) -> list[str]:
    seen = {g for r in records for g in r.get(field, {})}
    order = list(TRAIN_ORDER) + ["head", "other"]
    return [g for g in order if g in seen] + sorted(seen - set(order))


def plot_curves(records: Sequence[dict], path, *, title: str = "") -> Path:
    """Per-step curves of one run from its metrics records -> PNG at ``path``."""
    mon = [r for r in records if r.get("kind") == "monitor"]
    evals = [r for r in records if r.get("kind") == "eval"]
    train = [r for r in records if r.get("kind") in ("monitor", "train")]
    fig, ax = figure(1, 3, (15, 4))
    for g in _groups(mon, "plasticity_mean"):
        pts = [(r["step"], r["plasticity_mean"][g]) for r in mon if g in r["plasticity_mean"]]
        ax[0, 0].plot(*zip(*pts, strict=True), marker=".", label=g)
    ax[0, 0].set(xlabel="step", ylabel="plasticity (mean over layers)", title="plasticity")
    for g in _groups(mon, "grad_norm"):
        pts = [(r["step"], r["grad_norm"][g]) for r in mon if g in r["grad_norm"]]
        ax[0, 1].plot(*zip(*pts, strict=True), marker=".", label=g)
    ax[0, 1].set(xlabel="step", ylabel="gradient norm", title="gradient norm per component")
    if any(r["grad_norm"] for r in mon):
        ax[0, 1].set_yscale("log")
    if train:
        ax[0, 2].plot([r["step"] for r in train], [r["loss"] for r in train], color="C0", label="train loss")
    ax[0, 2].set(xlabel="step", ylabel="loss", title="loss and validation accuracy")
    if evals:
        acc_ax = ax[0, 2].twinx()
        acc_ax.plot([r["step"] for r in evals], [r["acc"] for r in evals], "o-", color="C3", label="val acc")
        acc_ax.set_ylabel("accuracy")
        acc_ax.set_ylim(0, 1)
    for a in ax[0, :2]:
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return save(fig, path)


def plot_grid(rows: Sequence[dict], folder) -> list[Path]:
    """Grid figures from :func:`vitplast.finetune.aggregate` rows -> PNGs in ``folder``."""
    folder = Path(folder)
    out = []
    fig, ax = figure(1, 1, (max(5, 1.1 * len(rows) + 2), 4))
    labels = [r["train"] if len({x["lr"] for x in rows}) == 1 else f"{r['train']}\nlr={r['lr']:g}"
              for r in rows]
    ax[0, 0].bar(range(len(rows)), [r["acc_mean"] for r in rows], yerr=[r["acc_std"] for r in rows],
                 capsize=4, color=[f"C{i % 10}" for i in range(len(rows))])
    ax[0, 0].set_xticks(range(len(rows)), labels)
    ax[0, 0].set(ylabel="validation accuracy (mean ± std over seeds)", title="accuracy per trained component")
    ax[0, 0].axhline(rows[0]["initial_acc"] if rows else 0, color="grey", ls="--", lw=1, label="before")
    ax[0, 0].legend(fontsize=8)
    out.append(save(fig, folder / "accuracy_per_component.png"))

    pts = [r for r in rows if "plasticity" in r]
    fig, ax = figure(1, 1, (5, 4))
    for i, r in enumerate(pts):
        ax[0, 0].errorbar(r["plasticity"], r["gain"], yerr=r["acc_std"], fmt="o", color=f"C{i % 10}",
                          capsize=3)
        ax[0, 0].annotate(r["train"], (r["plasticity"], r["gain"]), textcoords="offset points", xytext=(4, 4))
    over = rows[0]["gain_over"] if rows else "initial"
    ax[0, 0].set(xlabel="plasticity before finetuning", title="plasticity vs accuracy gain",
                 ylabel=f"accuracy gain over {'linear probing' if over == 'head' else 'start'}")
    out.append(save(fig, folder / "plasticity_vs_gain.png"))
    return out
