"""The analysis phase of a claim: each dataset's result (what its claim.json holds: the options, the
plan in numbers, the estimate, the measurement, the analysis of the claim's own runs and the budgets'
from every run, the runs; `analyse_dataset`), and over several datasets the aggregate. A ``--shard``'s
result is its runs (`shard_result`). Every non-finite float is None (strict JSON; the reports print
"nan")."""

from __future__ import annotations

import math
import time

from .aggregate import aggregate_claims, format_aggregate
from .analysis import analyse
from .budgets import analyse_budgets
from .grid import ClaimPlan, DatasetGrid
from .layer_report import format_layer_report
from .layers import analyse_layers
from .options import ClaimOptions
from .plan_summary import counts
from .report import format_report
from .training import Trained

RUN_KEYS = ("train", "lr", "seed", "final_acc", "initial_acc", "trainable_params", "run_dir", "reused")
MEASUREMENT_KEYS = ("components", "layers", "pairs", "chunks", "seconds", "provenance", "criteria_seconds")


def shard_result(plan: ClaimPlan, trained: Trained) -> dict:
    """What a ``--shard`` returns: the options, the plan and its own runs."""
    return {"config": plan.record, "plan": plan.summary, "runs": [_kept(s) for s in trained.shard]}


def analyse_claim(opts: ClaimOptions, plan: ClaimPlan, measured: dict[str, dict], trained: Trained, est,
                  *, started: float, train_seconds: float) -> dict:
    """The claim's result: one dataset's (`analyse_dataset`), or over several ``{"config", "plan",
    "estimate", "datasets": {name: result}, "aggregate", "text"}``. ``started``: when the claim
    began (``time.perf_counter``), for its wall time."""
    results = {g.key: analyse_dataset(opts, g, measured[g.key], trained.groups[g.key],
                                      trained.budget_sets[g.key], trained.lrs[g.key], plan.record, est)
               for g in plan.grids}
    seconds = time.perf_counter() - started
    for r in results.values():
        r["plan"].update(train_seconds=train_seconds, seconds=seconds)
    agg = None
    if plan.several:
        named = {g.dataset.name: results[g.key] for g in plan.grids}
        agg = finite_or_none(aggregate_claims(named, permutations=opts.permutations, seed=opts.stats_seed))
    for g in plan.grids:  # each dataset's report
        r = results[g.key]
        r["text"] = format_layer_report(r) if g.units is not None else format_report(r)
    if not plan.several:
        return results[""]
    summary = {**plan.summary, "trained": sum(r["plan"]["trained"] for r in named.values()),
               "reused": sum(r["plan"]["reused"] for r in named.values())}
    return {"config": plan.record, "plan": summary, "estimate": est, "datasets": named, "aggregate": agg,
            "text": format_aggregate(agg)}


def analyse_dataset(opts: ClaimOptions, g: DatasetGrid, measured: dict, summaries: list[dict],
                    budget_sets: list, lrs: list[float], record: dict, est) -> dict:
    """One dataset's result (what its claim.json holds; `analyse_claim` adds its report under
    ``"text"``): the analysis of the claim's own runs (``lrs``: the learning rates they used), and the
    budgets' from every run (``summaries``)."""
    every, summaries = summaries, [s for s in summaries if s["train"] in g.trains]  # the claim's own
    runs = [_kept(s) for s in every]
    reused = sum(s["reused"] for s in every)
    plan = {"runs": len(g.runs), **counts(g.runs), "trains": g.trains, "lrs": opts.lr, "seeds": opts.seed,
            "steps": opts.steps, "trained": len(every) - reused, "reused": reused,
            "budget_trains": g.budget_trains, "budget_runs": len(every) - len(summaries)}
    common = dict(lrs=lrs, seeds=opts.seed, bootstrap=opts.bootstrap, permutations=opts.permutations,
                  seed=opts.stats_seed)
    if g.units is not None:
        analysis = analyse_layers(measured, summaries, units=g.units, criteria=measured.get("unit_scores"),
                                  **common)
    else:
        analysis = analyse(measured, summaries, components=opts.ranked, baseline=opts.baseline,
                           extra=opts.extra_baselines, criteria=measured.get("criteria"), **common)
    analysis["budgets"] = analyse_budgets(budget_sets, every, seeds=opts.seed,
                                          unit="components" if g.units is None else "parameters")
    if opts.lr_auto:
        plan["lrs_run"] = lrs
    measurement = {k: measured[k] for k in MEASUREMENT_KEYS if k in measured}
    return finite_or_none({"config": {**record, "data": g.dataset.spec}, "plan": plan, "estimate": est,
                           "measurement": measurement, "analysis": analysis, "runs": runs})


def _kept(summary: dict) -> dict:
    """What claim.json keeps of a run's summary."""
    return {k: summary[k] for k in RUN_KEYS}


def finite_or_none(obj):
    """``obj`` with every non-finite float replaced by None (strict JSON; the reports print "nan")."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj
