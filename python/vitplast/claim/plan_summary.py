"""The plan of a claim in numbers (``plan`` of claim.json) and in the lines it is said in: the runs
over the whole grid and the states of their directories, the budgets' runs, and a ``--shard``'s part."""

from __future__ import annotations

from collections.abc import Sequence

from ..outputs.reporter import Reporter
from .options import ClaimOptions


def counts(runs: Sequence) -> dict:
    """How many of ``runs`` (planned runs) are finished, partial and new."""
    return {s: sum(r.state == s for r in runs) for s in ("finished", "partial", "new")}


def _listed(trains: list[str], most: int = 6) -> str:
    return ", ".join(trains[:most]) + (f" ... ({len(trains) - most} more)" if len(trains) > most else "")


def plan_summary(opts: ClaimOptions, grids: Sequence, reporter: Reporter) -> dict:
    """The plan's counts over the whole grid (``grids``: each dataset's `DatasetGrid`), said in lines
    (and the shard's part of it)."""
    runs = [r for g in grids for r in g.runs]
    states = counts(runs)
    finished, partial, new = states.values()
    first = grids[0]
    listing = ", ".join(first.trains) if first.units is None else (
        f"{len(first.units)} (component, layer) units, head")
    over = f"{len(grids)} arms (dataset x optimiser) x " if len(grids) > 1 else ""
    n_trains = len(first.trains) + len(first.budget_trains)
    reporter.say(f"claim: {len(runs)} finetuning runs = {over}{n_trains} trained ({listing}; "
                 f"{len(first.budget_trains)} for the budgets) x {len(first.dataset.lrs)} learning rates x "
                 f"{len(opts.seed)} seeds, {opts.steps} steps each; {finished} finished, {partial} partial, "
                 f"{new} new")
    planned = sum(g.budget_plan.planned_runs for g in grids)
    most = sum(g.budget_plan.most_after_scoring for g in grids)
    plan = {"runs": len(runs), **states, "trains": first.trains, "lrs": [list(g.dataset.lrs) for g in grids],
            "seeds": opts.seed, "steps": opts.steps, "datasets": [g.dataset.spec for g in grids],
            "budget_runs": planned, "budget_runs_after_scoring_at_most": most,
            "budget_runs_at_most": planned + most}
    unit = "components" if first.units is None else "parameters"
    listed = _listed(first.budget_trains)
    reporter.say(f"budgets {', '.join(f'{b:,}' for b in first.budget_plan.budgets)} ({unit}): {planned} of "
                 f"these runs ({len(first.budget_trains)} sets and references: {listed}); "
                 f"after the criteria are scored, at most {most} more (a criterion's set outside the "
                 f"random sets): at most {planned + most} runs for the budgets in all")
    if opts.shard is None:
        return plan
    mine = opts.shard.select(runs)
    source = " (from SLURM_ARRAY_TASK_ID; --shard none trains them all)" if opts.shard_env else ""
    done = sum(r.state == "finished" for r in mine)
    reporter.say(f"shard {opts.shard}{source}: {len(mine)} of these runs ({done} finished)")
    return {**plan, "shard": {"shard": str(opts.shard), "runs": len(mine), **counts(mine)}}
