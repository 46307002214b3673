"""The grid's report: rows per (train, lr) aggregated over seeds, and the printed per-component table.

A row's ``gain_at_lr`` is its mean accuracy minus the head-only run's mean at the **same** lr (or the accuracy
before finetuning without a head-only run; ``gain_at_lr_over`` says which): not the claim's ``best_lr_gain``,
which takes each train at its own best lr and pairs the seeds (`vitplast.claim.analysis`)."""

from __future__ import annotations

import math
import statistics

from ..runs.summary import RunSummary
from .selection import TrainPlan, labels


def aggregate(summaries: list, components=None, plans=()) -> list[dict]:
    """Rows per (train, lr) of the run summaries (`RunSummary`, or their fields): accuracy mean +- std over
    seeds, plasticity of the trained component at the start, ``gain_at_lr``: the gain over linear probing
    (``head`` rows of the same lr) when present, else over the accuracy before finetuning; with ``--holdout``,
    ``holdout_acc`` (mean over seeds of the held-out training images' accuracy). ``components``: the run's
    component map (``--component``); ``plans``: the grid's `TrainPlan`s (a summary's ``train`` not among them
    is parsed)."""
    known = {str(p): p for p in plans}
    typed = [RunSummary.of(s) for s in summaries]
    groups: dict[tuple, list[RunSummary]] = {}
    start_plast: dict[str, list[float]] = {}
    for s in typed:
        groups.setdefault((s.train, s.lr), []).append(s)
        for c, v in (s.plasticity_start or {}).items():
            start_plast.setdefault(c, []).append(math.nan if v is None else v)
    rows = []
    for (train, lr), runs in groups.items():
        accs = [r.final_acc for r in runs]
        row = {"train": train, "lr": lr, "seeds": [r.seed for r in runs], "n": len(runs),
               "acc_mean": statistics.fmean(accs),
               "acc_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
               "initial_acc": statistics.fmean(r.initial_acc for r in runs),
               "trainable_params": runs[0].trainable_params}
        if all(r.holdout_acc is not None for r in runs):
            row["holdout_acc"] = statistics.fmean(r.holdout_acc for r in runs)
        plan = known.get(train) or TrainPlan.parse(train, components)
        comps = [p for p in plan.parts if p in labels(components)]
        if len(comps) == 1 and comps[0] in start_plast:
            row["plasticity"] = statistics.fmean(start_plast[comps[0]])
        rows.append(row)
    for row in rows:
        head = [r for r in rows if r["train"] == "head" and r["lr"] == row["lr"]]
        base = head[0]["acc_mean"] if head else row["initial_acc"]
        row["gain_at_lr"] = row["acc_mean"] - base
        row["gain_at_lr_over"] = "head" if head else "initial"
    return rows


def format_table(rows: list[dict]) -> str:
    """The per-component table (the paper's): accuracy mean +- std over seeds (``(n = 1)`` for a single seed,
    which has no std), gain at the same lr, plasticity, parameters; with ``--holdout``, the held-out accuracy
    last."""
    held = any("holdout_acc" in r for r in rows)
    head = (f"{'train':<16} {'lr':>8} {'seeds':>5} {'accuracy':>17} {'acc. gain':>9} {'plasticity':>10} "
            f"{'params':>10}" + (f" {'held-out':>8}" if held else ""))
    lines = [head, "-" * len(head)]
    for r in rows:
        plast = f"{r['plasticity']:.3f}" if "plasticity" in r else "-"
        spread = f"± {r['acc_std']:<6.4f}" if r["n"] >= 2 else f"{'(n = 1)':<8}"  # no std of one seed
        lines.append(f"{r['train']:<16} {r['lr']:>8.2g} {r['n']:>5} {r['acc_mean']:>9.4f} {spread}"
                     f" {r['gain_at_lr']:>+9.4f} {plast:>10} {r['trainable_params']:>10,}"
                     + (f" {r['holdout_acc']:>8.4f}" if "holdout_acc" in r else f" {'-':>8}" if held else ""))
    if rows:
        over = rows[0]["gain_at_lr_over"]
        base = "linear probing (head)" if over == "head" else "the accuracy before finetuning"
        lines.append(f"(acc. gain: gain_at_lr, the accuracy difference over {base})")
        if held:
            lines.append("(held-out: holdout_acc, the accuracy on the training images --holdout kept out of "
                         "training; accuracy: on the validation data)")
    return "\n".join(lines)
