"""``claim(opts)``: the library function behind ``vitplast claim`` (see its HELP in command.py).

Plan (every input checked, every existing run's config compared, nothing written), estimate, measure
and score the criteria, train through the executor (this process, ``--jobs`` processes, Ray tasks;
``--shard`` trains its slice and stops there), then the second phase: the criteria's sets of
``--budgets`` that the plan could not know before scoring (`.grid.plan_budgets`), planned and trained
through the same grid driver (a shard neither scores nor trains them: the run without ``--shard`` does,
as it does ``--lr auto``'s widening), then per dataset the analysis and its reports, and over several
datasets the aggregate.
This process, the driver, is the one writer of the experiment's summaries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from pathlib import Path

from ..models.families import family_of
from ..options.fields import options_for
from ..outputs.reporter import Reporter
from ..runs.executors import Executor
from ..runs.grid import GridSession, refuse_unfinished, runs_of_this_process
from ..runs.rundir import write_json_atomic
from ..runtime.device import resolve_device
from ..runtime.distributed import DistContext
from ..runtime.environment import world
from .aggregate import aggregate_claims, format_aggregate, plot_aggregate
from .analysis import analyse
from .budget_report import plot_budgets
from .budgets import analyse_budgets
from .criteria_scores import criteria_record, criteria_seconds, dataset_criteria
from .datasets import dataset_plans
from .finetuning import PlannedRun, check_plan, plan_runs, train_all
from .grid import DatasetGrid, counts, estimate, plan_budgets, plan_dataset, plan_summary
from .layer_report import format_layer_report, plot_layer_claim
from .layers import analyse_layers, unit_name
from .lr_auto import lrs_run, widen_groups
from .measurement import measure_dataset, write_measurement
from .options import ClaimOptions
from .plasticity import chunk_result, unit_means
from .report import format_report, plot_claim


@dataclasses.dataclass(frozen=True)
class Session:
    """Where a claim runs: its grid session (process group, threads, reporter), device, executor, and
    how many runs share this machine."""

    grid: GridSession
    device: object  # torch.device
    reporter: Reporter
    progress: bool
    threads: int | None
    executor: Executor
    n_procs: int  # runs at once on this machine (1 where a cluster places them)

    @property
    def dist(self) -> DistContext:
        return self.grid.dist


def _threads(opts: ClaimOptions, device) -> int | None:
    """``--threads``, else 1 for the digits ViT on CPU (its matrices are tiny: more threads per run
    only add synchronisation), else torch's default."""
    if opts.threads is not None:
        return opts.threads
    return 1 if family_of(opts.model).small and device.type == "cpu" else None


def _jobs(opts: ClaimOptions, device) -> int:
    """``--jobs``, else one process per core up to 2 for the digits ViT on CPU (one thread each),
    else 1 (a large model uses the cores, or the GPU, within one run). Executors that place runs on a
    cluster do not use it."""
    if opts.jobs is not None:
        return opts.jobs
    small = family_of(opts.model).small and device.type == "cpu"
    if small and world()[0] == 1:
        return max(1, min(2, os.cpu_count() or 1))
    return 1


def claim_options(opts: ClaimOptions | None = None, /, **keywords) -> ClaimOptions:
    """``opts`` checked, or the options the keywords describe (the CLI's names, underscores for dashes:
    ``components="MHA,FC1,LN1"``, ``lr="1e-3,3e-3"``, ``seed="0,1,2"``, ``out=DIR``)."""
    return options_for(ClaimOptions, opts, keywords)


def claim(opts: ClaimOptions | None = None, /, *, reporter: Reporter | None = None, after_step=None,
          **keywords) -> dict:
    """Run the claim ``opts`` describes (a `ClaimOptions`, or keywords that build one).

    Returns ``{"config", "plan", "estimate", "measurement", "analysis", "runs", "text"}`` for one
    dataset; for several, ``{"config", "plan", "estimate", "datasets": {name: that dict}, "aggregate",
    "text"}``; a dry run: only ``config``, ``plan`` and ``estimate``; a ``--shard``: ``config``, ``plan``
    and ``runs``. Writes OUT/claim.json, OUT/claim.txt, OUT/claim.png (several datasets: those of each
    in OUT/datasets/NAME/, and OUT/aggregate.json, .txt, .png). ``reporter`` receives the messages
    (default: printed); ``after_step(done)`` is called after every step of every run trained in this
    process (a test may raise there to stop as if killed).
    """
    opts = claim_options(opts, **keywords)
    with GridSession(opts.device, None, reporter) as grid:  # the process group each finetune run joins
        device = resolve_device(opts.device, grid.dist.local_rank if grid.dist.enabled else None)
        grid.use_threads(_threads(opts, device))
        executor = grid.executor(opts, jobs=_jobs(opts, device), device_type=device.type)
        progress = grid.reporter.shows_progress(opts.progress) and grid.dist.is_main
        ses = Session(grid, device, grid.reporter, progress, grid.threads, executor,
                      executor.runs_at_once or 1)
        return _run(opts, ses, after_step)


def _run(opts: ClaimOptions, ses: Session, after_step) -> dict:
    """Plan, estimate, measure, train, analyse and write: each a function of its own."""
    t0 = time.perf_counter()
    run_bars = ses.progress and ses.executor.in_process
    grids = [plan_dataset(opts, d, device=ses.device, reporter=ses.reporter, progress=ses.progress)
             for d in dataset_plans(opts, progress=run_bars)]
    runs = [r for g in grids for r in g.runs]
    check_plan(runs, Path(opts.out))
    plan = plan_summary(opts, grids, ses.reporter)
    mine = runs_of_this_process(opts, runs)
    est = None
    if opts.dry_run or opts.time_budget is not None:
        est = estimate(opts, grids, mine, n_procs=ses.n_procs,
                       on_cluster=ses.executor.runs_at_once is None, progress=ses.progress,
                       reporter=ses.reporter)
    record = opts.record(jobs=ses.n_procs, data=opts.data if len(grids) > 1 else opts.data[0])
    if opts.dry_run:
        return {"config": record, "plan": plan, "estimate": est}
    if opts.analyse_only:
        _require_finished(runs)
    with _out_lock(opts, ses):  # one claim writes --out at a time
        with ses.executor as executor:  # connected (a cluster) before any file is written
            if (where := executor.describe()) is not None:
                ses.reporter.say(f"executor: {where}")
            measured = _measure(opts, ses, grids)
            t_train = time.perf_counter()
            if opts.shard is not None:
                summaries = train_all(mine, _prepared(grids), executor, ses.reporter, progress=ses.progress,
                                      after_step=after_step)
                return _shard_done(opts, ses, record, plan, (len(mine), len(runs)), summaries)
            groups, budget_sets = _train(opts, ses, executor, grids, measured, after_step)
        train_s = time.perf_counter() - t_train
        results = {g.key: _analyse(opts, ses, g, measured[g.key], groups[g.key], budget_sets[g.key], record,
                                   est) for g in grids}
        seconds = time.perf_counter() - t0
        for r in results.values():
            r["plan"].update(train_seconds=train_s, seconds=seconds)
        if len(grids) == 1:
            result = results[""]
            _write_one(result, grids[0], ses)
            return result
        return _aggregate(opts, ses, grids, results, record, plan, est)


@contextlib.contextmanager
def _out_lock(opts: ClaimOptions, ses: Session):
    """``--out`` held by this claim while it writes (``OUT/.lock``, `vitplast.runs.lock.RunLock`): a
    second claim on the same ``--out`` is refused (RunBusy, naming the holder and its lock). Shards of
    one claim write the same ``--out`` side by side and take no lock; nor do ranks other than the first."""
    if opts.shard is not None or not ses.grid.dist.is_main:
        yield
        return
    from ..runs.lock import RunLock

    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out).acquire()
    try:
        yield
    finally:
        lock.release()


def _prepared(grids: list[DatasetGrid]) -> dict:
    return {g.key: g.prepared for g in grids}


def _require_finished(runs: list[PlannedRun]) -> None:
    refuse_unfinished([r.spec.directory for r in runs],
                      then="train them first (every --shard, or a run without --analyse-only)")


def _measure(opts: ClaimOptions, ses: Session, grids: list[DatasetGrid]) -> dict[str, dict]:
    """Each dataset's plasticity chunks (a shard writes none: the final pass does)."""
    write = ses.dist.is_main and opts.shard is None
    out = {}
    for g in grids:
        if g.measured is not None:  # a layer claim measured while planning
            if write:
                write_measurement(g.dataset, g.measured)
            out[g.key] = g.measured
            if opts.shard is None:
                out[g.key]["unit_scores"], out[g.key]["criteria_seconds"] = _unit_scores(opts, ses, g, write)
        elif opts.shard is None:
            out[g.key] = measure_dataset(opts, g.dataset, ses.device, ses.reporter, progress=ses.progress,
                                         write=write, model=g.model)
            out[g.key]["criteria"] = dataset_criteria(opts, g.dataset, g.model, ses.device, ses.reporter,
                                                      progress=ses.progress, write=write)
            out[g.key]["criteria_seconds"] = criteria_seconds(out[g.key])
    return out


def _unit_scores(opts: ClaimOptions, ses: Session, g: DatasetGrid, write: bool) -> tuple[dict, dict]:
    """A layer claim's ``({criterion: {unit name: score}}, {criterion: seconds})``: plasticity from its
    measurement, the other ``--criteria`` scored (or read back) on the model the runs start from."""
    from .criteria_scores import score_dataset

    index = {c: i for i, c in enumerate(g.measured["components"])}
    plasticity = unit_means(g.measured)
    scores = {"plasticity": {unit_name(u): float(plasticity[index[u[0]], u[1]]) for u in g.units}}
    results = score_dataset(opts, g.dataset, g.model,
                            tuple(opts.criteria), ses.device, ses.reporter, progress=ses.progress,
                            write=write)
    for name, r in results.items():
        scores[name] = {unit_name(u): float(r.values[r.components.index(u[0]), u[1]]) if u[0] in r.components
                        else math.nan for u in g.units}
    seconds = {"plasticity": g.measured.get("seconds"), **{n: r.cost.seconds for n, r in results.items()}}
    return scores, seconds


def _budget_scores(opts: ClaimOptions, g: DatasetGrid, measured: dict) -> dict[str, dict]:
    """``{criterion: {unit: score}}`` the budgets' sets are picked by: plasticity first, then the other
    ``--criteria`` (a component claim's component scores, a layer claim's unit scores)."""
    if g.units is not None:
        return measured["unit_scores"]
    plasticity = chunk_result(measured)
    return {"plasticity": {c: plasticity.overall(c) for c in opts.ranked},
            **{n: v["scores"] for n, v in (measured.get("criteria") or {}).items()}}


def _shard_done(opts, ses: Session, record, plan, counts: tuple[int, int], summaries) -> dict:
    ses.grid.shard_done(opts, *counts, reused=sum(s["reused"] for s in summaries),
                        then="when every shard is done, run the same command without --shard (or with "
                        "--analyse-only) for the analysis")
    return {"config": record, "plan": plan, "runs": [_kept(s) for s in summaries]}


def _train(opts: ClaimOptions, ses: Session, executor, grids: list[DatasetGrid], measured: dict, after_step
           ) -> tuple[dict[str, list[dict]], dict[str, list]]:
    """Every run trained or loaded (``--lr auto``: widened where a best lr sits at an edge, on every
    dataset at once), then the budgets' runs (`_train_budgets`); returns each dataset's summaries and
    its budgets' sets."""
    prepared = _prepared(grids)

    def train(planned):
        if opts.analyse_only:
            _require_finished(planned)
        return train_all(planned, prepared, executor, ses.reporter, progress=ses.progress,
                         after_step=after_step)

    summaries = train([r for g in grids for r in g.runs])
    groups, k = {}, 0
    for g in grids:
        groups[g.key], k = summaries[k:k + len(g.runs)], k + len(g.runs)
    if opts.lr_auto:
        by_key = {g.key: g for g in grids}

        def plan(key, t, lr):
            g = by_key[key]
            new = plan_runs(g.dataset.out, g.dataset.settings, [t], [lr], opts.seed, key)
            check_plan(new, Path(opts.out))
            return new

        _, groups = widen_groups(groups, start=opts.lr, plan=plan, train=train, say=ses.reporter.say)
    budget_sets, added = {}, []
    for g in grids:
        budget_sets[g.key], new = plan_budgets(opts, g, _budget_scores(opts, g, measured[g.key]))
        added += new
    check_plan(added, Path(opts.out))
    if added:
        todo = sum(r.state != "finished" for r in added)
        ses.reporter.say(f"budgets: {len(added)} runs of the criteria's sets outside the random sets "
                         f"({todo} to train)")
        for r, summary in zip(added, train(added), strict=True):
            groups[r.dataset].append(summary)
        if opts.lr_auto:
            _, groups = widen_groups(groups, start=opts.lr, plan=plan, train=train, say=ses.reporter.say)
    return groups, budget_sets


def _analyse(opts: ClaimOptions, ses: Session, g: DatasetGrid, measured: dict, summaries: list[dict],
             budget_sets: list, record: dict, est) -> dict:
    """One dataset's result (what its claim.json holds): the analysis of the claim's own runs, and the
    budgets' from every run."""
    every, summaries = summaries, [s for s in summaries if s["train"] in g.trains]  # the claim's own
    lrs = lrs_run(summaries) if opts.lr_auto else opts.lr
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
    reused = sum(s["reused"] for s in every)
    plan = {"runs": len(g.runs), **counts(g.runs), "trains": g.trains, "lrs": opts.lr, "seeds": opts.seed,
            "steps": opts.steps, "trained": len(every) - reused, "reused": reused,
            "budget_trains": g.budget_trains, "budget_runs": len(every) - len(summaries)}
    if opts.lr_auto:
        plan["lrs_run"] = lrs
    kept = ("components", "layers", "pairs", "chunks", "seconds", "provenance", "criteria_seconds")
    measurement = {k: measured[k] for k in kept if k in measured}
    result = _finite_or_none({"config": {**record, "data": g.dataset.spec}, "plan": plan, "estimate": est,
                              "measurement": measurement, "analysis": analysis,
                              "runs": [_kept(s) for s in every]})
    result["text"] = format_layer_report(result) if g.units is not None else format_report(result)
    return result


def _kept(s: dict) -> dict:
    return {k: s[k] for k in ("train", "lr", "seed", "final_acc", "initial_acc", "trainable_params",
                              "run_dir", "reused")}


def _write_one(result: dict, g: DatasetGrid, ses: Session, *, say: bool = True) -> None:
    """claim.json, claim.txt and claim.png of one dataset (rank 0), and the report on the reporter."""
    out = g.dataset.out
    if ses.dist.is_main:
        from vitplast_kernels.atomic_io import atomic_write_bytes

        write_json_atomic(out / "claim.json", {k: v for k, v in result.items() if k != "text"})
        write_json_atomic(out / "criteria.json", criteria_record(result))
        atomic_write_bytes(out / "claim.txt", (result["text"] + "\n").encode())
        (plot_layer_claim if g.units is not None else plot_claim)(result, out / "claim.png")
        plot_budgets(result, out / "budgets.png")
    plan = result["plan"]
    if say:
        ses.reporter.say(result["text"])
    ses.reporter.say(f"({g.dataset.name + ': ' if g.dataset.several else ''}{plan['trained']} runs trained, "
                     f"{plan['reused']} reused, {plan['seconds']:.0f} s; wrote {out / 'claim.json'}, "
                     f"{out / 'claim.txt'}, {out / 'claim.png'}, {out / 'budgets.png'})")


def _aggregate(opts: ClaimOptions, ses: Session, grids: list[DatasetGrid], results: dict, record: dict,
               plan: dict, est) -> dict:
    """Each dataset's reports, then the aggregate over them (OUT/aggregate.json, .txt, .png)."""
    for g in grids:
        _write_one(results[g.key], g, ses, say=False)
    named = {g.dataset.name: results[g.key] for g in grids}
    agg = _finite_or_none(aggregate_claims(named, permutations=opts.permutations, seed=opts.stats_seed))
    text = format_aggregate(agg)
    plan = {**plan, "trained": sum(r["plan"]["trained"] for r in named.values()),
            "reused": sum(r["plan"]["reused"] for r in named.values())}
    result = {"config": record, "plan": plan, "estimate": est, "datasets": named, "aggregate": agg,
              "text": text}
    out = Path(opts.out)
    if ses.dist.is_main:
        from vitplast_kernels.atomic_io import atomic_write_bytes

        write_json_atomic(out / "aggregate.json",
                          {k: v for k, v in result.items() if k not in ("text", "datasets")})
        atomic_write_bytes(out / "aggregate.txt", (text + "\n").encode())
        plot_aggregate(agg, out / "aggregate.png")
    ses.reporter.say(text)
    ses.reporter.say(f"(wrote {out / 'aggregate.json'}, {out / 'aggregate.txt'}, {out / 'aggregate.png'}; "
                     f"each dataset's report in {out / 'datasets'})")
    return result


def _finite_or_none(obj):
    """``obj`` with every non-finite float replaced by None (strict JSON; the reports print "nan")."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj
