"""``vitplast claim --lr auto``: no train is judged at a clipped learning rate.

The claim first runs the starting grid (the default ``--lr`` values). A train whose best learning
rate (mean accuracy over seeds, on the images ``--holdout`` kept out of training when every run of the
train holds them, else the final accuracy; ties: the smaller lr) is the largest it was run at gets the next
one up, ``LR_AUTO_FACTOR`` times larger (two significant digits); at the smallest, the next one down.
The same holds for the best lr on the final accuracy, where the paper reads its gain: a grid is
widened until neither choice sits at its edge, the lr chosen staying the held-out one. Only that train
is run at the new lr, for every seed, and the check repeats until every train's best lr
is interior, within stated bounds: at most ``LR_AUTO_STEPS`` steps of ``LR_AUTO_FACTOR`` beyond the
starting grid on each side (an lr up to 3^4 = 81 times the grid's largest, or 1/81 of its smallest). A
run that diverged scores what it predicts after diverging (about chance), below the lr before it, so
the step past the edge brackets that lr. A train still at an edge after its last step is named in the
report, and the claim's verdict is withheld ("not bracketed"). Every decision depends only on finished
runs, so a killed claim rerun with the same options makes the same decisions and reuses every run.
"""

from __future__ import annotations

from ..runs.summary import RunSummary

LR_AUTO_FACTOR = 3.0
LR_AUTO_STEPS = 4  # steps beyond the starting grid, per side, at most


def _round(v: float) -> float:
    return float(f"{v:.2g}")


def widen(summaries: list, start: list[float]) -> list[tuple[str, float]]:
    """``(train, lr)`` pairs to run next: one step beyond each edge where a train's best lr sits, while
    fewer than `LR_AUTO_STEPS` steps were taken on that side. The best lr is the one the claim chooses
    (on held-out accuracy where every run of the train holds it) or the one the paper's gain is read at
    (on the final accuracy): the grid is widened until neither is clipped; which lr is chosen stays the
    held-out accuracy's."""
    runs = list(map(RunSummary.of, summaries))
    held_out = {s.train for s in runs} - {s.train for s in runs if s.holdout_acc is None}
    lo, hi = min(start), max(start)
    out = []
    for train in dict.fromkeys(s.train for s in runs):
        own = [s for s in runs if s.train == train]
        lrs = sorted({s.lr for s in own})
        if len(lrs) < 2:
            continue
        bests = {_best(own, lrs, "final_acc")}
        if train in held_out:
            bests.add(_best(own, lrs, "holdout_acc"))
        if lrs[-1] in bests and sum(v > hi for v in lrs) < LR_AUTO_STEPS:
            out.append((train, _round(lrs[-1] * LR_AUTO_FACTOR)))
        if lrs[0] in bests and sum(v < lo for v in lrs) < LR_AUTO_STEPS:
            out.append((train, _round(lrs[0] / LR_AUTO_FACTOR)))
    return out


def _best(runs: list[RunSummary], lrs: list[float], accuracy: str) -> float:
    """The lr of ``lrs`` whose runs' mean ``accuracy`` is highest (ties: the smaller lr)."""
    per_lr = {v: [getattr(s, accuracy) for s in runs if s.lr == v] for v in lrs}
    means = [sum(accs) / len(accs) for accs in per_lr.values()]
    return lrs[means.index(max(means))]


def widen_groups(groups: dict[str, list[dict]], *, start: dict[str, list[float]], plan, train, say
                 ) -> tuple[list, dict[str, list[dict]]]:
    """Widen until no train's best lr is at an edge (or its steps are used up), in every group (an
    arm's summaries, ``start`` its starting grid) at once. ``plan(group, train, lr)`` gives the new jobs
    (one per seed), ``train(jobs)`` their summaries. Returns the new jobs and every group's summaries."""
    groups = {name: list(s) for name, s in groups.items()}
    added: list = []
    while True:
        extra = {name: pairs for name, s in groups.items() if (pairs := widen(s, start[name]))}
        if not extra:
            return added, groups
        planned = [(name, job) for name, pairs in extra.items() for t, lr in pairs
                   for job in plan(name, t, lr)]
        jobs = [job for _, job in planned]
        say(f"--lr auto: best lr at the grid's edge for {sum(map(len, extra.values()))} train(s); running "
            + ", ".join(f"{(name + ': ') if len(groups) > 1 else ''}{t} at {lr:g}"
                        for name, pairs in extra.items() for t, lr in pairs))
        for (name, _), summary in zip(planned, train(jobs), strict=True):
            groups[name].append(summary)
        added += jobs


def lrs_run(summaries: list) -> list[float]:
    """Every learning rate some run used, ascending (the union of the trains' grids)."""
    return sorted({RunSummary.of(s).lr for s in summaries})
