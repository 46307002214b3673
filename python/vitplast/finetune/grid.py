"""``finetune(opts)``: the grid of ``vitplast finetune``, every (train, lr, seed) of the options trained
into its run directory by `vitplast.finetune.loop.train_run`, then aggregated.

One combination trains into ``--out``; several train into ``--out/<train>-lr<lr>-s<seed>/`` and write
``--out/grid_summary.json`` and the grid plots. The runs of a grid go through an executor
(`vitplast.runs.executors`): one after another in this process, ``--jobs`` processes, or Ray tasks
(``--executor ray``); ``--shard I/N`` trains one slice of the run list and writes no summary, which a
final pass without ``--shard`` (with ``--resume``, or ``--analyse-only``) writes. Results never depend
on the executor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ..options.fields import options_for
from ..outputs.reporter import Reporter
from ..runs.grid import GridRun, GridSession, refuse_unfinished, runs_of_this_process, train_grid
from ..runs.rundir import (
    RunDir,
    RunDirError,
    config_differences,
    refuse_existing_runs,
    write_json_atomic,
)
from ..runtime.distributed import DistContext
from .loop import AfterStep, train_run
from .options import FinetuneOptions
from .preflight import Prepared, prepare
from .report import aggregate, format_table
from .spec import RunSpec, run_name


def finetune_options(opts: FinetuneOptions | None = None, /, **keywords) -> FinetuneOptions:
    """``opts`` checked, or the options the keywords describe (the CLI's names, underscores for dashes:
    ``train="MHA,FC1"``, ``lr="1e-3,1e-4"``, ``steps=200``, ``out="runs/x"``), over ``opts``' values
    when both are given; ValueError names the option."""
    return options_for(FinetuneOptions, opts, keywords)


def grid_specs(opts: FinetuneOptions) -> list[RunSpec]:
    """One spec per (train, lr, seed), in that nesting order (the run list that ``--shard`` slices)."""
    settings, out = opts.settings(), Path(opts.out)
    combos = [(t, lr, s) for t in opts.train for lr in opts.lr for s in opts.seed]
    resume = opts.resume or opts.analyse_only
    return [RunSpec(t, lr, s, out if len(combos) == 1 else out / run_name(t, lr, s), settings, resume)
            for t, lr, s in combos]


def config_mismatches(specs: Sequence[RunSpec]) -> list[tuple[RunSpec, str]]:
    """``(spec, what differs)`` for every existing run directory (partial or finished) whose
    config.json differs from what ``spec`` would write: what a resume would refuse."""
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
    """One line naming every mismatching run (its directory, relative to ``root`` when under it),
    grouped by what differs."""
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
    """One run of a grid: `train_run` with its options as positional arguments (the grid driver's
    job; a worker passes none of the last three: its reporter is silent)."""
    return train_run(spec, prepared, dctx=dctx, reporter=reporter or Reporter.silent(), after_step=after_step)


def finetune(opts: FinetuneOptions | None = None, /, *, reporter: Reporter | None = None,
             after_step: AfterStep | None = None, **keywords) -> dict:
    """Run the finetuning grid of ``opts`` (a `FinetuneOptions`, or keywords that build one).

    Returns ``{"runs": [summary per combination], "table": aggregate rows, "table_text": str}`` (a
    ``--shard``: the runs of the shard and ``"shard"``). ``reporter`` receives the messages (default:
    printed); ``after_step(done)`` is called after every step of every run trained in this process (a
    test may raise there to stop as if killed).
    """
    opts = finetune_options(opts, **keywords)
    prepared = prepare(opts.settings(), opts.train, opts.seed[0])  # before any file is created
    specs = grid_specs(opts)
    with GridSession(opts.device, opts.threads, reporter) as session:
        _check_existing(opts, specs)
        runs = [GridRun(s.directory, s.label, train_grid_run, (s, prepared),
                        retry_args=(dataclasses.replace(s, resume=True), prepared),
                        local_args=(session.dist, session.reporter, after_step)) for s in specs]
        if opts.analyse_only:
            refuse_unfinished([r.directory for r in runs],
                              then="train them first (the shards, or without --analyse-only)")
            summaries = [RunDir(s.directory).summary() for s in specs]
        else:
            device_type = "cuda" if opts.device.startswith("cuda") else "cpu"
            todo = runs_of_this_process(opts, runs)
            jobs = min(opts.jobs or 1, max(1, len(todo)))
            with session.executor(opts, jobs=jobs, device_type=device_type) as executor:
                summaries = train_grid(todo, executor, session.reporter, progress=opts.progress,
                                       alone_here=opts.shard is None)
        if opts.shard is not None:
            session.shard_done(opts, len(summaries), len(specs), then="run the grid without --shard (with "
                               "--resume, or --analyse-only) to aggregate it")
            return {"runs": summaries, "shard": str(opts.shard)}
        return _aggregate(opts, specs, summaries, session.dist, session.reporter)


def _check_existing(opts: FinetuneOptions, specs: list[RunSpec]) -> None:
    """Refuses a finished grid's --out without --resume, existing runs of other options, and (without
    --resume) the runs of this process that its --out already holds."""
    out = Path(opts.out)
    if len(specs) > 1 and (out / "grid_summary.json").exists() and not specs[0].resume:
        raise RunDirError(f"--out {out} already holds a finished grid (grid_summary.json); refusing to "
                          "overwrite it: choose another --out (or pass --resume to load its results)")
    if specs[0].resume and (mismatches := config_mismatches(specs)):
        raise RunDirError(mismatch_message(mismatches))
    if len(specs) > 1 and not specs[0].resume:  # before any run trains, not when the held run's turn comes
        mine = opts.shard.select(specs) if opts.shard is not None else specs
        refuse_existing_runs([s.directory for s in mine], out)


def _aggregate(opts: FinetuneOptions, specs: list[RunSpec], summaries: list[dict], dctx: DistContext,
               reporter: Reporter) -> dict:
    """The table of the grid and, for several runs, grid_summary.json and the grid plots."""
    for spec, s in zip(specs, summaries, strict=True):
        held = f", held-out accuracy {s['holdout_acc']:.4f}" if s.get("holdout_acc") is not None else ""
        reporter.say(f"{spec.train:<10} lr={spec.lr:g} seed={spec.seed}: accuracy {s['initial_acc']:.4f} "
                     f"-> {s['final_acc']:.4f} ({s['trainable_params']:,} trainable parameters{held})")
    rows = aggregate(summaries, opts.components, opts.train)
    result = {"runs": summaries, "table": rows, "table_text": format_table(rows)}
    out = Path(opts.out)
    if dctx.is_main and len(specs) > 1:
        config = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
        write_json_atomic(out / "grid_summary.json", {"config": config, **result})
        if opts.plots:
            from .plots import plot_grid

            plot_grid(rows, out / "plots")
    reporter.say(result["table_text"])
    return result
