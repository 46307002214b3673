"""``finetune(opts)``: the grid of ``vitplast finetune``, every (train, lr, seed) of the options trained into
its run directory by `vitplast.finetune.loop.train_run`, then aggregated.

One combination trains into ``--out``; several train into ``--out/<train>-lr<lr>-s<seed>/`` and write
``--out/grid_summary.json`` and the grid plots. The runs of a grid go through an executor
(`vitplast.runs.executors`): one after another in this process, ``--jobs`` processes, or Ray tasks
(``--executor ray``); ``--shard I/N`` trains one slice of the run list and writes no summary, which a final
pass without ``--shard`` (with ``--resume``, or ``--analyse-only``) writes. Results never depend on the
executor. `plan_grid` (the runs and their directories' states) and `train_grid_run` (the job the grid driver
calls) are the planner and the job of ``vitplast claim``'s runs too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ..options.fields import options_for
from ..outputs.reporter import Reporter
from ..runs.grid import (
    HELD,
    NOT_FINISHED,
    GridRun,
    GridSession,
    refuse_runs,
    runs_of_this_process,
    train_grid,
)
from ..runs.rundir import RunDir, RunDirError, config_differences, write_json_atomic
from ..runs.summary import RunSummary
from ..runtime.distributed import DistContext
from .loop import AfterStep, train_run
from .options import FinetuneOptions, RunSettings
from .plots import plot_grid
from .preflight import Prepared, prepare
from .report import aggregate, format_table
from .result import FinetuneResult
from .spec import RunSpec, run_name


def finetune_options(opts: FinetuneOptions | None = None, /, **keywords) -> FinetuneOptions:
    """``opts`` checked, or the options the keywords describe (the CLI's names, underscores for dashes:
    ``train="MHA,FC1"``, ``lr="1e-3,1e-4"``, ``steps=200``, ``out="runs/x"``), over ``opts``' values when both
    are given; ValueError names the option."""
    return options_for(FinetuneOptions, opts, keywords)


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of a grid as planned: its spec, the state of its directory then (``RunDir.state``: new,
    partial, finished or foreign) and its dataset's name (a claim over several datasets; else "")."""

    spec: RunSpec
    state: str
    dataset: str = ""

    @property
    def label(self) -> str:
        return f"{self.dataset}: {self.spec.label}" if self.dataset else self.spec.label

    def grid_run(self, prepared: Prepared, local_args: tuple = ()) -> GridRun:
        """The run for the grid driver: `train_grid_run` on its spec (a retry resumes it) and ``prepared``;
        ``local_args`` (`train_grid_run`'s last three) when it trains in this process."""
        spec = self.spec
        retry = None if spec.resume else (dataclasses.replace(spec, resume=True), prepared)
        return GridRun(train_grid_run, (spec, prepared), spec.directory, self.label, retry_args=retry,
                       local_args=local_args, state=self.state)


def plan_grid(settings: RunSettings, trains: Sequence[str], lrs: Sequence[float], seeds: Sequence[int],
              under: Path, *, seed_major: bool = False, one_in_place: bool = False, resume: bool = True,
              dataset: str = "") -> list[PlannedRun]:
    """The one planner of a grid's runs: one per (train, lr, seed) in that nesting order (the run list that
    ``--shard`` slices; ``seed_major``: seed, train, lr, a claim's order, so that an interrupted claim has
    whole seeds to show), each in ``under/<train>-lr<lr>-s<seed>/`` (``one_in_place``: a grid of one run
    trains into ``under`` itself, as ``vitplast finetune`` does), with its directory's state now. ``resume``:
    whether a run continues (or loads) what its directory holds."""
    if seed_major:
        combos = [(t, lr, s) for s in seeds for t in trains for lr in lrs]
    else:
        combos = [(t, lr, s) for t in trains for lr in lrs for s in seeds]
    dirs = [under if one_in_place and len(combos) == 1 else under / run_name(*c) for c in combos]
    return [PlannedRun(RunSpec(*c, d, settings, resume), RunDir(d).state(), dataset)
            for c, d in zip(combos, dirs, strict=True)]


def config_mismatches(specs: Sequence[RunSpec]) -> list[tuple[RunSpec, str]]:
    """``(spec, what differs)`` for every existing run directory (partial or finished) whose config.json
    differs from what ``spec`` would write: what a resume would refuse."""
    out = []
    for spec in specs:
        rd = RunDir(spec.directory)
        if rd.state() not in ("partial", "finished"):
            continue
        try:
            saved = rd.saved_config()
            diffs = config_differences(saved, spec.resume_config(saved))
        except (RunDirError, ValueError) as exc:
            diffs = [str(exc)]
        if diffs:
            out.append((spec, "; ".join(diffs)))
    return out


def mismatch_message(mismatches: Sequence[tuple[RunSpec, str]], root: Path | None = None) -> str:
    """One line naming every mismatching run (its directory, relative to ``root`` when under it), grouped by
    what differs."""
    groups: dict[str, list[str]] = {}
    for spec, diff in mismatches:
        name = spec.directory.name
        if root is not None and spec.directory.is_relative_to(root):
            name = str(spec.directory.relative_to(root))
        groups.setdefault(diff, []).append(name)
    parts = [f"{diff} in {len(names)} run(s) ({', '.join(names)})" for diff, names in groups.items()]
    return (f"{len(mismatches)} existing run(s) were trained with options that differ: " + "; ".join(parts)
            + "; pass the same options, or choose another --out")


def train_grid_run(spec: RunSpec, prepared: Prepared, dctx: DistContext | None = None,
                   reporter: Reporter | None = None, after_step: AfterStep | None = None) -> dict:
    """The one job of every grid (finetune's, claim's): `train_run` with its options as positional arguments;
    a run trained in another process gets none of the last three (its reporter is silent), one trained here
    what its command passes as local arguments."""
    return train_run(spec, prepared, dctx=dctx, reporter=reporter or Reporter.silent(), after_step=after_step)


def finetune(opts: FinetuneOptions | None = None, /, *, reporter: Reporter | None = None,
             after_step: AfterStep | None = None, **keywords) -> FinetuneResult:
    """Run the finetuning grid of ``opts`` (a `FinetuneOptions`, or keywords that build one).

    Returns a `vitplast.finetune.result.FinetuneResult`: the summary of every combination's run and the
    grid's table (a ``--shard``: the runs of the shard and ``shard``). ``reporter`` receives the messages
    (default: printed); ``after_step(done)`` is called after every step of every run trained in this process
    (a test may raise there to stop as if killed).
    """
    opts = finetune_options(opts, **keywords)
    prepared = prepare(opts.settings(), opts.train, opts.seed[0])  # before any file is created
    planned = plan_grid(opts.settings(), opts.train, opts.lr, opts.seed, Path(opts.out), one_in_place=True,
                        resume=opts.resume or opts.analyse_only)  # the runs of the grid, in run order
    specs = [r.spec for r in planned]
    with GridSession(opts.device, opts.threads, reporter) as session:
        _check_existing(opts, planned)
        if opts.analyse_only:
            refuse_runs([(r.spec.directory, r.state) for r in planned], NOT_FINISHED, lead="--analyse-only",
                        then="train them first (the shards, or without --analyse-only)")
            summaries = [RunDir(s.directory).summary() for s in specs]
        else:
            local = (session.dist, session.reporter, after_step)
            todo = runs_of_this_process(opts, [r.grid_run(prepared, local) for r in planned])
            _, executor = session.place_runs(opts, threads=opts.threads,
                                             jobs=min(opts.jobs or 1, max(1, len(todo))))
            with executor:
                summaries = train_grid(todo, executor, session.reporter, progress=opts.progress,
                                       alone_here=opts.shard is None)
        if opts.shard is not None:
            session.shard_done(opts, len(summaries), len(specs), then="run the grid without --shard (with "
                               "--resume, or --analyse-only) to aggregate it")
            return FinetuneResult([RunSummary.of(s) for s in summaries], shard=str(opts.shard))
        return _aggregate(opts, specs, summaries, session.dist, session.reporter)


def _check_existing(opts: FinetuneOptions, planned: list[PlannedRun]) -> None:
    """Refuses a finished grid's --out without --resume, existing runs of other options, and (without
    --resume) the runs of this process that its --out already holds."""
    out, specs = Path(opts.out), [r.spec for r in planned]
    if len(specs) > 1 and (out / "grid_summary.json").exists() and not specs[0].resume:
        raise RunDirError(f"--out {out} already holds a finished grid (grid_summary.json); refusing to "
                          "overwrite it: choose another --out (or pass --resume to load its results)")
    if specs[0].resume and (mismatches := config_mismatches(specs)):
        raise RunDirError(mismatch_message(mismatches))
    if len(specs) > 1 and not specs[0].resume:  # before any run trains, not when the held run's turn comes
        mine = opts.shard.select(planned) if opts.shard is not None else planned
        refuse_runs([(r.spec.directory, r.state) for r in mine], HELD, lead=f"--out {out} holds runs already",
                    root=out, error=RunDirError, then="nothing was trained: pass --resume to continue them "
                    "and load the finished ones, or choose another --out")


def _aggregate(opts: FinetuneOptions, specs: list[RunSpec], summaries: list[dict], dctx: DistContext,
               reporter: Reporter) -> FinetuneResult:
    """The table of the grid and, for several runs, grid_summary.json and the grid plots."""
    runs = [RunSummary.of(s) for s in summaries]  # each checked once, then read as typed
    for spec, s in zip(specs, runs, strict=True):
        held = f", held-out accuracy {s.holdout_acc:.4f}" if s.holdout_acc is not None else ""
        reporter.say(f"{spec.train:<10} lr={spec.lr:g} seed={spec.seed}: accuracy {s.initial_acc:.4f} "
                     f"-> {s.final_acc:.4f} ({s.trainable_params:,} trainable parameters{held})")
    rows = aggregate(runs, opts.components, opts.train)
    result = FinetuneResult(runs, rows, format_table(rows))
    out = Path(opts.out)
    if dctx.is_main and len(specs) > 1:
        config = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
        write_json_atomic(out / "grid_summary.json", {"config": config, **result.to_json()})
        if opts.plots:
            plot_grid(rows, out / "plots")
    reporter.say(result.table_text)
    return result
