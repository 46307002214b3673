"""The grid of a claim, planned before anything is written (`plan_claim`): per dataset, what is trained
(the components and baselines, or a layer claim's units), the model and data checked once
(`vitplast.finetune.preflight.prepare`) and the runs with the state of their directories
(`plan_dataset`); then the plan's lines (`.plan_summary`), this process's runs and the options' record.

The sets of ``--budgets`` that do not depend on any score are planned with the claim's own runs
(`.budget_plan`), so a ``--shard`` trains its slice of them; a criterion's set that is none of those is
known once the criteria are scored and is trained then, a second phase of the same grid that the run
without ``--shard`` trains (`.training`). The plan says how many runs that second phase may add at
most."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..finetune.preflight import Prepared, PreparedModel, check_trains_fit, prepare_model
from ..outputs.reporter import Reporter
from ..runs.grid import NOT_FINISHED, refuse_runs, runs_of_this_process
from .budget_plan import BudgetPlan, plan_budget_sets
from .datasets import DatasetPlan, dataset_plans
from .finetuning import PlannedRun, plan_runs
from .measurement import planned_measurement
from .options import ClaimOptions
from .plan_summary import plan_summary
from .units import layer_units


@dataclasses.dataclass(frozen=True)
class DatasetGrid:
    """One dataset's part of the grid."""

    dataset: DatasetPlan
    key: str  # the runs' dataset name ("" for a claim over one dataset)
    trains: list[str]  # the claim's own trains: the units or components and its baselines
    model: PreparedModel  # the dataset's model and data, built and checked once
    runs: list[PlannedRun]  # of the trains and of the budget_trains
    budget_plan: BudgetPlan  # --budgets as resolved, the trains of the sets known before scoring
    names: list[str]  # what the claim ranks: --components ranked, or a layer claim's units by name
    units: list | None = None  # a layer claim's (component, layer) units
    sizes: dict | None = None  # and their trainable-parameter counts, by unit name
    measured: dict | None = None  # a layer claim measures first: its plan depends on it

    @property
    def prepared(self) -> Prepared:
        return self.model.prepared

    @property
    def budget_trains(self) -> list[str]:
        """The budgets' sets and references known before scoring, not in trains."""
        return self.budget_plan.trains


@dataclasses.dataclass(frozen=True)
class ClaimPlan:
    """The whole grid: each dataset's part, every run, this process's runs (its ``--shard``'s, none
    with ``--analyse-only``), the plan's counts (``plan`` of claim.json) and the options' record."""

    grids: list[DatasetGrid]
    runs: list[PlannedRun]
    mine: list[PlannedRun]
    summary: dict
    record: dict

    @property
    def several(self) -> bool:
        return len(self.grids) > 1


def plan_claim(opts: ClaimOptions, *, device, amp, reporter: Reporter, progress: bool, run_bars: bool,
               n_procs: int) -> ClaimPlan:
    """Every dataset planned (nothing written), the plan said, this process's runs chosen; with
    ``--analyse-only`` (not a dry run) every run must be finished already."""
    grids = [plan_dataset(opts, d, device=device, amp=amp, reporter=reporter, progress=progress)
             for d in dataset_plans(opts, progress=run_bars)]
    record = opts.record(jobs=n_procs, data=opts.data if len(opts.data) > 1 else opts.data[0],
                         optimizer=opts.optimizer if len(opts.optimizer) > 1 else opts.optimizer[0])
    runs = [r for g in grids for r in g.runs]
    summary = plan_summary(opts, grids, reporter)
    mine = runs_of_this_process(opts, runs)
    if opts.analyse_only and not opts.dry_run:
        refuse_runs([(r.spec.directory, r.state) for r in runs], NOT_FINISHED, lead="--analyse-only",
                    then="train them first (every --shard, or a run without --analyse-only)")
    return ClaimPlan(grids, runs, mine, summary, record)


def plan_dataset(opts: ClaimOptions, dataset: DatasetPlan, *, device, amp, reporter: Reporter,
                 progress: bool) -> DatasetGrid:
    """The dataset's trains, checks and runs; a layer claim measures plasticity first (in memory)."""
    model = prepare_model(dataset.settings, opts.seed[0])  # the model and data built and checked once
    measured = planned_measurement(opts, dataset, device, reporter, amp=amp, progress=progress, model=model)
    units = sizes = None
    if opts.granularity == "layer":
        units, sizes, names = layer_units(opts, measured, model.built.net)
        trains = names + ["head"]
    else:
        trains, names = opts.trains, list(opts.ranked)
    budget_plan = plan_budget_sets(opts, names, sizes, trains, len(dataset.lrs), model.built.net,
                                   dataset.settings.components)
    check_trains_fit(dataset.settings, trains, model)
    key = dataset.name if dataset.several else ""
    runs = plan_runs(dataset.out, dataset.settings, trains + budget_plan.trains, dataset.lrs, opts.seed, key,
                     root=Path(opts.out))
    return DatasetGrid(dataset, key, trains, model, runs, budget_plan, names, units, sizes, measured)
