"""The grid of a claim, planned before anything is written: per dataset, what is trained (the components
and baselines, or a layer claim's units), the model and data checked once (`vitplast.finetune.prepare`)
and the runs with the state of their directories; then the plan's one line and, on request, the
estimate of how long the runs still to train take. The sets of ``--budgets`` (`.budgets`) depend on the
criteria scores: they are planned after scoring (`plan_budgets`), a second phase of the same grid;
before it, the plan says how many runs they may add at most (`budget_bound`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..finetune import Prepared, prepare, unit_sizes
from ..models.builder import build_model
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
    trains: list[str]
    prepared: Prepared
    runs: list[PlannedRun]
    budgets: list[int]  # --budgets as resolved: components, or parameters at layer granularity
    units: list | None = None  # a layer claim's (component, layer) units
    sizes: dict | None = None  # and their trainable-parameter counts, by unit name
    measured: dict | None = None  # a layer claim measures first: its plan depends on it


def plan_dataset(opts: ClaimOptions, dataset: DatasetPlan, *, device, reporter: Reporter,
                 progress: bool) -> DatasetGrid:
    """The dataset's trains, checks and runs; a layer claim measures plasticity first (in memory)."""
    measured = units = sizes = None
    if opts.granularity == "layer":
        measured = measure_dataset(opts, dataset, device, reporter, progress=progress, write=False)
        units, sizes, trains = plan_layers(opts, measured)
        budgets = list(opts.budgets or [2 * max(sizes.values())])
        smallest = min(v for v in sizes.values() if v)
        if min(budgets) < smallest:
            raise ValueError(f"--budgets {min(budgets)}: no (component, layer) unit fits (the smallest has "
                             f"{smallest:,} parameters)")
    else:
        saved_measurement(opts, dataset)  # one measured with other options is refused now
        trains = opts.trains
        budgets = list(opts.budgets or DEFAULT_COMPONENT_BUDGETS)
    prepared = prepare(dataset.settings, trains, opts.seed[0])  # the model and data checked once
    key = dataset.name if dataset.several else ""
    runs = plan_runs(dataset.out, dataset.settings, trains, opts.lr, opts.seed, key)
    return DatasetGrid(dataset, key, trains, prepared, runs, budgets, units, sizes, measured)


def plan_layers(opts: ClaimOptions, measured: dict):
    """``(units, sizes, trains)`` of a layer-granularity claim: every (component, layer) unit of
    ``--components``, each unit's trainable-parameter count by name, and the trains (each unit, then
    the head-only baseline, as ``vitplast finetune --train`` values)."""
    built = build_model(opts, 10)
    sizes = unit_sizes(built.net)
    units = units_of(measured, opts.components)
    missing = [u for u in units if u not in sizes]
    if missing:
        raise ValueError(f"the component map of {opts.model} has no {unit_name(missing[0])}")
    names = [unit_name(u) for u in units]
    return units, {unit_name(u): sizes[u] for u in units}, names + ["head"]


def budget_units(opts: ClaimOptions, g: DatasetGrid) -> list[str]:
    """What a budget counts: the ranked components, or a layer claim's units by name."""
    return list(opts.ranked) if g.units is None else [unit_name(u) for u in g.units]


def plan_budgets(opts: ClaimOptions, g: DatasetGrid, scores: dict[str, dict]
                 ) -> tuple[list[BudgetSets], list[PlannedRun]]:
    """Each budget's sets from the criteria ``scores`` (``{criterion: {unit: score}}``), and the runs
    they add: every set not trained yet, and the head-only and full-finetuning references where the
    claim does not train them, for every lr of ``--lr`` and seed."""
    units = budget_units(opts, g)
    common = dict(draws=opts.draws, seed=opts.stats_seed)
    if g.units is None:
        sets = [component_sets(scores, units, k, **common) for k in g.budgets]
    else:
        sets = [layer_sets(scores, units, g.sizes, b, **common) for b in g.budgets]
    wanted = [t for s in sets for t in s.trains] + list(REFERENCES)
    new = [t for t in dict.fromkeys(wanted) if t not in g.trains]
    return sets, plan_runs(g.dataset.out, g.dataset.settings, new, opts.lr, opts.seed, g.key)


def budget_bound(opts: ClaimOptions, g: DatasetGrid) -> dict:
    """At most how many runs ``--budgets`` adds to this dataset's plan (before the criteria are
    scored: `vitplast.claim.budgets.upper_bound`), the references included."""
    bound = upper_bound(g.budgets, units=budget_units(opts, g), draws=opts.draws,
                        n_criteria=len(dict.fromkeys(["plasticity", *opts.criteria])), sizes=g.sizes)
    references = [t for t in REFERENCES if t not in g.trains]
    sets = bound["sets"] + len(references)
    return {**bound, "references": references, "runs": sets * len(opts.lr) * len(opts.seed)}


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
    reporter.say(f"claim: {len(runs)} finetuning runs = {over}{len(first.trains)} trained ({listing}) x "
                 f"{len(opts.lr)} learning rates x {len(opts.seed)} seeds, {opts.steps} steps each; "
                 f"{states['finished']} finished, {states['partial']} partial, {states['new']} new")
    plan = {"runs": len(runs), **states, "trains": first.trains, "lrs": opts.lr, "seeds": opts.seed,
            "steps": opts.steps, "datasets": [g.dataset.spec for g in grids]}
    bounds = [budget_bound(opts, g) for g in grids]
    plan["budget_runs_at_most"] = sum(b["runs"] for b in bounds)
    unit = "components" if first.units is None else "parameters"
    reporter.say(f"budgets {', '.join(f'{b:,}' for b in first.budgets)} ({unit}): after the criteria are "
                 f"scored, at most {plan['budget_runs_at_most']} more runs (sets per budget: "
                 + ", ".join(f"{b:,}: {n}" for b, n in bounds[0]["per_budget"].items())
                 + (f"; references {', '.join(bounds[0]['references'])}" if bounds[0]["references"] else "")
                 + f"; x {len(opts.lr)} learning rates x {len(opts.seed)} seeds{over and ' x datasets'})")
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
    most = sum(budget_bound(opts, g)["runs"] for g in grids)
    note += f"; --budgets may add up to {most} runs (not in this estimate)" if most else ""
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
