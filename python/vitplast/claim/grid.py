"""The grid of a claim, planned before anything is written: per dataset, what is trained (the components
and baselines, or a layer claim's units), the model and data checked once (`vitplast.finetune.prepare`)
and the runs with the state of their directories; then the plan's one line and, on request, the
estimate of how long the runs still to train take.

The sets of ``--budgets`` (`.budgets`) that do not depend on any score (the random sets, the attention
rule's, and the head-only and full-finetuning references) are planned with the claim's own runs, so a
``--shard`` trains its slice of them; a criterion's set that is none of those (only where the random
sets are drawn, not enumerated) is known once the criteria are scored and is planned then
(`plan_budgets`), a second phase of the same grid that the run without ``--shard`` trains. The plan
says how many runs that second phase may add at most (`budget_bound`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..finetune import Prepared, PreparedModel, check_trains_fit, prepare_model, unit_sizes
from ..models.families import family_of
from ..outputs.reporter import Reporter
from .budgets import (
    DEFAULT_COMPONENT_BUDGETS,
    REFERENCES,
    BudgetSets,
    component_sets,
    layer_sets,
    upper_bound,
)
from .datasets import DatasetPlan
from .finetuning import PlannedRun, calibrate, estimate_seconds, plan_runs
from .layers import unit_name, units_of
from .measurement import measure_dataset, saved_measurement
from .options import COMPONENT_STEPS, LAYER_STEPS, ClaimOptions


@dataclasses.dataclass(frozen=True)
class DatasetGrid:
    """One dataset's part of the grid."""

    dataset: DatasetPlan
    key: str  # the runs' dataset name ("" for a claim over one dataset)
    trains: list[str]  # the claim's own trains: the units or components and its baselines
    model: PreparedModel  # the dataset's model and data, built and checked once
    runs: list[PlannedRun]  # of the trains and of the budget_trains
    budgets: list[int]  # --budgets as resolved: components, or parameters at layer granularity
    budget_trains: list[str]  # the budgets' sets and references known before scoring, not in trains
    units: list | None = None  # a layer claim's (component, layer) units
    sizes: dict | None = None  # and their trainable-parameter counts, by unit name
    measured: dict | None = None  # a layer claim measures first: its plan depends on it

    @property
    def prepared(self) -> Prepared:
        return self.model.prepared


def plan_dataset(opts: ClaimOptions, dataset: DatasetPlan, *, device, reporter: Reporter,
                 progress: bool) -> DatasetGrid:
    """The dataset's trains, checks and runs; a layer claim measures plasticity first (in memory)."""
    model = prepare_model(dataset.settings, opts.seed[0])  # the model and data built and checked once
    measured = units = sizes = None
    if opts.granularity == "layer":
        measured = measure_dataset(opts, dataset, device, reporter, progress=progress, write=False,
                                   model=model)
        units, sizes, trains = plan_layers(opts, measured, model.built.net)
        budgets = list(opts.budgets or [2 * max(sizes.values())])
    else:
        saved_measurement(opts, dataset)  # one measured with other options is refused now
        trains = opts.trains
        budgets = list(opts.budgets or DEFAULT_COMPONENT_BUDGETS)
    names = unit_names(opts, units)
    sets = budget_sets(opts, names, sizes, budgets, scores={})
    references = [t for t in REFERENCES if t not in trains]
    budget_trains = new_trains(sets, trains + references) + references
    check_trains_fit(dataset.settings, trains, model)
    key = dataset.name if dataset.several else ""
    runs = plan_runs(dataset.out, dataset.settings, trains + budget_trains, opts.lr, opts.seed, key)
    return DatasetGrid(dataset, key, trains, model, runs, budgets, budget_trains, units, sizes, measured)


def plan_layers(opts: ClaimOptions, measured: dict, net):
    """``(units, sizes, trains)`` of a layer-granularity claim: every (component, layer) unit of
    ``--components``, each unit's trainable-parameter count by name (read from ``net``, the dataset's
    model), and the trains (each unit, then the head-only baseline, as ``vitplast finetune --train``
    values)."""
    sizes = unit_sizes(net)
    units = units_of(measured, opts.components)
    missing = [u for u in units if u not in sizes]
    if missing:
        raise ValueError(f"the component map of {opts.model} has no {unit_name(missing[0])}")
    names = [unit_name(u) for u in units]
    return units, {unit_name(u): sizes[u] for u in units}, names + ["head"]


def budget_sets(opts: ClaimOptions, units: list[str], sizes: dict | None, budgets: list[int],
                scores: dict[str, dict]) -> list[BudgetSets]:
    """Each budget's sets over ``units`` (component names, or a layer claim's unit names with their
    ``sizes``) from the criteria ``scores`` (``{criterion: {unit: score}}``; none: the random sets and
    the attention rule only)."""
    common = dict(draws=opts.draws, seed=opts.stats_seed)
    if sizes is None:
        return [component_sets(scores, units, k, **common) for k in budgets]
    return [layer_sets(scores, units, sizes, b, **common) for b in budgets]


def unit_names(opts: ClaimOptions, units: list | None) -> list[str]:
    """What a budget's sets are made of: ``--components`` ranked by the claim, or a layer claim's
    ``(component, layer)`` units by name (``MHA@3``)."""
    return list(opts.ranked) if units is None else [unit_name(u) for u in units]


def plan_budgets(opts: ClaimOptions, g: DatasetGrid, scores: dict[str, dict]
                 ) -> tuple[list[BudgetSets], list[PlannedRun]]:
    """Each budget's sets from the criteria ``scores``, and the runs of the criteria's sets that the
    plan does not hold yet (for every lr of ``--lr`` and seed)."""
    names = unit_names(opts, g.units)
    sets = budget_sets(opts, names, g.sizes, g.budgets, scores)
    new = new_trains(sets, g.trains + g.budget_trains)
    return sets, plan_runs(g.dataset.out, g.dataset.settings, new, opts.lr, opts.seed, g.key)


def budget_bound(opts: ClaimOptions, g: DatasetGrid) -> dict:
    """The budgets' runs in the plan, and at most how many more the criteria's sets add once scored
    (`vitplast.claim.budgets.upper_bound`)."""
    names = unit_names(opts, g.units)
    sets = budget_sets(opts, names, g.sizes, g.budgets, scores={})
    bound = upper_bound(sets, n_criteria=len(dict.fromkeys(["plasticity", *opts.criteria])),
                        layer=g.units is not None)
    per_run = len(opts.lr) * len(opts.seed)
    return {"planned": len(g.budget_trains) * per_run, "after_scoring_at_most": bound["sets"] * per_run,
            "per_budget": bound["per_budget"]}


def new_trains(sets: list[BudgetSets], planned: list[str]) -> list[str]:
    """The trains of ``sets`` not in ``planned``, each once (sets several criteria pick are one run)."""
    return [t for t in dict.fromkeys(t for s in sets for t in s.trains) if t not in planned]


def _listed(trains: list[str], most: int = 6) -> str:
    return ", ".join(trains[:most]) + (f" ... ({len(trains) - most} more)" if len(trains) > most else "")


def counts(runs: Sequence[PlannedRun]) -> dict:
    return {s: sum(r.state == s for r in runs) for s in ("finished", "partial", "new")}


def plan_summary(opts: ClaimOptions, grids: Sequence[DatasetGrid], reporter: Reporter) -> dict:
    """The plan's counts over the whole grid, said in one line (and the shard's part of it)."""
    runs = [r for g in grids for r in g.runs]
    states = counts(runs)
    first = grids[0]
    listing = ", ".join(first.trains) if first.units is None else (
        f"{len(first.units)} (component, layer) units, head")
    over = f"{len(grids)} datasets x " if len(grids) > 1 else ""
    n_trains = len(first.trains) + len(first.budget_trains)
    reporter.say(f"claim: {len(runs)} finetuning runs = {over}{n_trains} trained ({listing}; "
                 f"{len(first.budget_trains)} for the budgets) x {len(opts.lr)} learning rates x "
                 f"{len(opts.seed)} seeds, {opts.steps} steps each; {states['finished']} finished, "
                 f"{states['partial']} partial, {states['new']} new")
    plan = {"runs": len(runs), **states, "trains": first.trains, "lrs": opts.lr, "seeds": opts.seed,
            "steps": opts.steps, "datasets": [g.dataset.spec for g in grids]}
    bounds = [budget_bound(opts, g) for g in grids]
    planned, most = sum(b["planned"] for b in bounds), sum(b["after_scoring_at_most"] for b in bounds)
    plan["budget_runs"] = planned
    plan["budget_runs_after_scoring_at_most"] = most
    plan["budget_runs_at_most"] = planned + most
    unit = "components" if first.units is None else "parameters"
    reporter.say(f"budgets {', '.join(f'{b:,}' for b in first.budgets)} ({unit}): {planned} of these runs "
                 f"({len(first.budget_trains)} sets and references: {_listed(first.budget_trains)}); "
                 f"after the criteria are scored, at most {most} more (a criterion's set outside the "
                 f"random sets): at most {planned + most} runs for the budgets in all")
    if opts.shard is not None:
        mine = opts.shard.select(runs)
        plan["shard"] = {"shard": str(opts.shard), "runs": len(mine), **counts(mine)}
        source = " (from SLURM_ARRAY_TASK_ID; --shard none trains them all)" if opts.shard_env else ""
        reporter.say(f"shard {opts.shard}{source}: {len(mine)} of these runs ({plan['shard']['finished']} "
                     "finished)")
    return plan


def estimate(opts: ClaimOptions, grids: Sequence[DatasetGrid], runs: Sequence[PlannedRun], *,
             n_procs: int, on_cluster: bool, progress: bool, reporter: Reporter) -> dict:
    """Short timed runs (on the first dataset, in this process), the wall time of ``runs`` still to
    train (``n_procs`` at once; ``on_cluster``: a cluster decides how many), and ``--time-budget``'s
    refusal."""
    family_of(opts.model).prepare(progress)  # a one-time pretraining is not a finetuning cost
    first = grids[0]
    calib = calibrate(first.dataset.settings, first.prepared, first.trains,
                      probe_steps=min(opts.calibrate_steps, opts.steps))
    seconds = estimate_seconds(runs, calib, opts.steps, n_procs)
    procs = f" over {n_procs} processes (if the cores are free)" if n_procs > 1 else ""
    if on_cluster:
        procs = " of run time in all (the cluster divides it by the runs it trains at once)"
    note = "; --lr auto may add runs" if opts.lr_auto else ""
    most = sum(budget_bound(opts, g)["after_scoring_at_most"] for g in grids)
    note += f"; the criteria's sets may add up to {most} runs (not in this estimate)" if most else ""
    note += "; timed on the first dataset" if len(grids) > 1 else ""
    if opts.granularity == "layer" and opts.steps == LAYER_STEPS:
        note += (f"; a layer claim trains {LAYER_STEPS} steps per run by default ({COMPONENT_STEPS} for a "
                 "component claim) to stay near 10 min on 2 cores")
    todo = sum(r.state != "finished" for r in runs)
    reporter.say(f"estimate: {calib['overhead_s']:.1f} s per run + per step (ms): {_step_text(calib)}; "
                 f"{todo} runs to train: about {seconds / 60:.1f} min{procs} (calibration took "
                 f"{calib['seconds']:.1f} s){note}")
    if opts.time_budget is not None and seconds > 60 * opts.time_budget:
        raise ValueError(f"the estimated {seconds / 60:.1f} min exceed --time-budget {opts.time_budget:g} "
                         "min: fewer --lr/--seed values or --steps")
    return {**calib, "remaining_seconds": seconds, "jobs": n_procs}


def _step_text(calib: dict) -> str:
    """Calibrated step times, trains with the same time grouped (a layer claim has ~25 trains)."""
    groups: dict[str, list[str]] = {}
    for t, v in calib["step_s"].items():
        groups.setdefault(f"{1000 * v:.1f}", []).append(t)
    return ", ".join(f"{', '.join(ts) if len(ts) <= 3 else f'{len(ts)} trains'} {v}"
                     for v, ts in groups.items())
