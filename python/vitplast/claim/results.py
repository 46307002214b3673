"""The analysis phase of a claim: each dataset's `ClaimResult` (what its claim.json holds: the options, the
plan in numbers, the estimate, the measurement, the analysis of the claim's own runs and the budgets'
from every run, the runs; `analyse_dataset`), and over several datasets the aggregate. A ``--shard``'s
result is its runs (`shard_result`). Every non-finite float is None (strict JSON; the reports print
"nan")."""

from __future__ import annotations

import dataclasses
import time

from ..runs.summary import RunSummary
from .aggregate import Aggregate, Arm, aggregate_claims, format_aggregate
from .analysis import analyse, finite
from .budgets import analyse_budgets
from .grid import ClaimPlan, DatasetGrid
from .options import ClaimOptions
from .plan_summary import counts
from .records import ClaimAnalysis
from .report import format_report
from .result import ClaimResult
from .training import Trained
from .units import ClaimUnits

MEASUREMENT_KEYS = ("components", "layers", "pairs", "chunks", "seconds", "provenance", "criteria_seconds",
                    "reused_files")


def shard_result(plan: ClaimPlan, trained: Trained) -> ClaimResult:
    """What a ``--shard`` returns: the options, the plan and its own runs."""
    return ClaimResult(plan.record, plan.summary, runs=[run_record(s) for s in trained.shard])


def analyse_claim(opts: ClaimOptions, plan: ClaimPlan, measured: dict[str, dict], trained: Trained, est,
                  *, started: float, train_seconds: float) -> ClaimResult:
    """The claim's result: one dataset's (`analyse_dataset`), or over several each one's under
    ``datasets`` with their ``aggregate`` and its report. ``started``: when the claim began
    (``time.perf_counter``), for its wall time."""
    results = {g.key: analyse_dataset(opts, g, measured[g.key], trained.groups[g.key],
                                      trained.budget_sets[g.key], trained.lrs[g.key], plan.record, est)
               for g in plan.grids}
    seconds = time.perf_counter() - started
    for r in results.values():
        r.plan.update(train_seconds=train_seconds, seconds=seconds)
    if not plan.several:
        return results[""]
    named = {g.dataset.name: results[g.key] for g in plan.grids}
    arms = {name: Arm(r.analysis, r.config["data"], r.config["optimizer"]) for name, r in named.items()}
    agg = aggregate_claims(arms, permutations=opts.permutations, seed=opts.stats_seed)
    summary = {**plan.summary, "trained": sum(r.plan["trained"] for r in named.values()),
               "reused": sum(r.plan["reused"] for r in named.values())}
    return ClaimResult(plan.record, summary, est, datasets=named,
                       aggregate=Aggregate.from_json(agg.to_json(), "aggregate.json", "aggregate"),
                       text=format_aggregate(agg))  # the aggregate as its file holds it


def analyse_dataset(opts: ClaimOptions, g: DatasetGrid, measured: dict, summaries: list,
                    budget_sets: list, lrs: list[float], record: dict, est) -> ClaimResult:
    """One dataset's result (what its claim.json holds, and its report): the analysis of the claim's
    own runs (``lrs``: the learning rates they used), and the budgets' from every run
    (``summaries``)."""
    every = [RunSummary.of(s) for s in summaries]
    runs = [run_record(s) for s in every]
    own = [s for s in every if s.train in g.trains]  # the claim's own runs
    reused = sum(s.reused for s in every)
    plan = {"runs": len(g.runs), **counts(g.runs), "trains": g.trains, "lrs": list(g.dataset.lrs),
            "seeds": opts.seed, "steps": opts.steps, "trained": len(every) - reused, "reused": reused,
            "budget_trains": g.budget_trains, "budget_runs": len(every) - len(own)}
    if opts.lr_auto:
        plan["lrs_run"] = lrs
    units = ClaimUnits.of(g.names, g.units)
    budgets = analyse_budgets(budget_sets, every, seeds=opts.seed, unit=units.budget_unit,
                              lora=g.budget_plan.lora_note)
    criteria = (measured.get("unit_scores")  # a layer claim's, plasticity's included; a component claim's:
                or {n: c["scores"] for n, c in (measured.get("criteria") or {}).items()})
    analysis = dataclasses.replace(analyse(
        measured, own, units=units, baseline=opts.baseline, extra=opts.extra_baselines, criteria=criteria,
        lrs=lrs, seeds=opts.seed, bootstrap=opts.bootstrap, permutations=opts.permutations,
        seed=opts.stats_seed), budgets=budgets)
    config = {**record, "data": g.dataset.spec, "optimizer": g.dataset.optimizer, "lr": list(g.dataset.lrs)}
    result = ClaimResult(finite(config), finite(plan), finite(est),
                         finite({k: measured[k] for k in MEASUREMENT_KEYS if k in measured}),
                         ClaimAnalysis.from_json(analysis.to_json()),  # as its file holds it
                         finite(runs))
    return dataclasses.replace(result, text=format_report(analysis, result.setup))


def run_record(s: RunSummary) -> dict:
    """What claim.json keeps of a run's summary."""
    return {"train": s.train, "lr": s.lr, "seed": s.seed, "final_acc": s.final_acc,
            "initial_acc": s.initial_acc, "trainable_params": s.trainable_params, "run_dir": s.run_dir,
            "reused": s.reused}
