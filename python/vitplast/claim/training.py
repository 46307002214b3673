"""The training phase of a claim: every run of the plan trained (or loaded) through the executor; a
``--shard`` trains its slice and stops there. The run without ``--shard`` then widens ``--lr auto``'s
grid where a best lr sits at an edge (`vitplast.claim.lr_auto.widen_groups`, every dataset at once)
and trains the second phase of the budgets: the criteria's sets that the plan could not know before
scoring (`vitplast.claim.budget_plan.budget_sets`), widened again with ``--lr auto``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from ..runs.grid import NOT_FINISHED, refuse_runs, train_grid
from ..runs.summary import RunSummary
from .finetuning import PlannedRun, plan_runs
from .grid import ClaimPlan
from .lr_auto import lrs_run, widen_groups
from .options import ClaimOptions
from .session import ClaimSession


@dataclasses.dataclass(frozen=True)
class Trained:
    """What the training phase leaves: each dataset's summaries (its claim's runs, the runs ``--lr
    auto`` added and the budgets'; by the runs' dataset name) and each dataset's budgets' sets; a
    ``--shard``'s own summaries only."""

    groups: dict[str, list[RunSummary]]
    budget_sets: dict[str, list]
    lrs: dict[str, list[float]]  # the learning rates the claim's own runs used (``--lr auto``: widened)
    shard: list[RunSummary] | None = None


def train_claim(opts: ClaimOptions, ses: ClaimSession, executor, plan: ClaimPlan,
                budgets: dict[str, tuple[list, list[str]]], after_step: Callable[[int], None] | None
                ) -> Trained:
    """Train the plan's runs; then ``--lr auto``'s widening and the budgets' second phase (``budgets``:
    each dataset's sets from the criteria's scores, and the trains of those the plan does not hold).
    A shard trains its own runs and ends with the line that says so. With ``--analyse-only`` every run
    must be finished already."""
    reporter, prepared = ses.reporter, {g.key: g.prepared for g in plan.grids}
    by_key = {g.key: g for g in plan.grids}

    def plan_trains(key: str, trains: list[str], lrs: list[float]) -> list[PlannedRun]:
        g = by_key[key]
        return plan_runs(g.dataset.out, g.dataset.settings, trains, lrs, opts.seed, key, root=Path(opts.out))

    def train(runs: list[PlannedRun]) -> list[RunSummary]:
        if opts.analyse_only:
            refuse_runs([(r.spec.directory, r.state) for r in runs], NOT_FINISHED, lead="--analyse-only",
                        then="train them first (every --shard, or a run without --analyse-only)")
        # through the grid driver: the summaries in run order, each with "reused" (True when finished
        # before); after_step goes to every run trained in this process (its messages dropped, as in a worker)
        grid = [r.grid_run(prepared[r.dataset], local_args=(None, None, after_step)) for r in runs]
        done = train_grid(grid, executor, reporter, progress=ses.progress, reuse_finished=True)
        return [RunSummary.of(s) for s in done]

    if opts.shard is not None:  # a --shard: its own runs, then the line it ends with
        summaries = train(plan.mine)
        ses.grid.shard_done(opts, len(plan.mine), len(plan.runs), reused=sum(s.reused for s in summaries),
                            then="when every shard is done, run the same command without --shard (or "
                            "with --analyse-only) for the analysis")
        return Trained({}, {}, {}, summaries)
    added = [r for g in plan.grids for r in plan_trains(g.key, budgets[g.key][1], g.dataset.lrs)]
    groups: dict[str, list[RunSummary]] = {g.key: [] for g in plan.grids}
    # the plan's runs, then the criteria's sets outside the random sets, each widened with --lr auto
    for runs in (plan.runs, added) if added else (plan.runs,):
        if runs is added:
            reporter.say(f"budgets: {len(added)} runs of the criteria's sets outside the random sets "
                         f"({sum(r.state != 'finished' for r in added)} to train)")
        for r, summary in zip(runs, train(runs), strict=True):
            groups[r.dataset].append(summary)
        if opts.lr_auto:
            _, groups = widen_groups(groups, start={k: g.dataset.lrs for k, g in by_key.items()}, train=train,
                                     say=reporter.say, plan=lambda key, t, lr: plan_trains(key, [t], [lr]))
    own = {g.key: [s for s in groups[g.key] if s.train in g.trains] for g in plan.grids}
    lrs = {key: lrs_run(summaries) if opts.lr_auto else list(by_key[key].dataset.lrs)
           for key, summaries in own.items()}
    return Trained(groups, {key: sets for key, (sets, _) in budgets.items()}, lrs)
