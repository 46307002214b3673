"""``finetune(opts)``: the grid of ``vitplast finetune``, every (train, lr, seed) of the options trained
into its run directory by :func:`vitplast.finetune.loop.train_run`, then aggregated.

One combination trains into ``--out``; several train into ``--out/<train>-lr<lr>-s<seed>/`` and write
``--out/grid_summary.json`` and the grid plots.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..options.fields import options_for
from ..outputs.reporter import Reporter
from ..runs.rundir import RunDirError, write_json_atomic
from ..runtime.distributed import init_distributed
from .loop import AfterStep, train_run
from .options import FinetuneOptions
from .preflight import prepare
from .report import aggregate, format_table
from .spec import RunSpec, run_name


def finetune_options(opts: FinetuneOptions | None = None, /, **keywords) -> FinetuneOptions:
    """``opts`` checked, or the options the keywords describe (the CLI's names, underscores for dashes:
    ``train="MHA,FC1"``, ``lr="1e-3,1e-4"``, ``steps=200``, ``out="runs/x"``), over ``opts``' values
    when both are given; ValueError names the option."""
    return options_for(FinetuneOptions, opts, keywords)


def grid_specs(opts: FinetuneOptions) -> list[RunSpec]:
    """One spec per (train, lr, seed), in that nesting order."""
    settings, out = opts.settings(), Path(opts.out)
    combos = [(t, lr, s) for t in opts.train for lr in opts.lr for s in opts.seed]
    return [RunSpec(t, lr, s, out if len(combos) == 1 else out / run_name(t, lr, s), settings, opts.resume)
            for t, lr, s in combos]


def finetune(opts: FinetuneOptions | None = None, /, *, reporter: Reporter | None = None,
             after_step: AfterStep | None = None, **keywords) -> dict:
    """Run the finetuning grid of ``opts`` (a :class:`FinetuneOptions`, or keywords that build one).

    Returns ``{"runs": [summary per combination], "table": aggregate rows, "table_text": str}``.
    ``reporter`` receives the messages (default: printed); ``after_step(done)`` is called after every
    step of every run (a test may raise there to stop as if killed).
    """
    opts = finetune_options(opts, **keywords)
    prepared = prepare(opts.settings(), opts.train, opts.seed[0])  # before any file is created
    specs = grid_specs(opts)
    out = Path(opts.out)
    reporter = reporter or Reporter()
    dctx = init_distributed(opts.device)
    if not dctx.is_main:
        reporter = Reporter.silent()
    try:
        if len(specs) > 1 and (out / "grid_summary.json").exists() and not opts.resume:
            raise RunDirError(f"--out {out} already holds a finished grid (grid_summary.json); refusing to "
                              "overwrite it: choose another --out (or pass --resume to load its results)")
        summaries = []
        for spec in specs:
            s = train_run(spec, prepared, dctx=dctx, reporter=reporter, after_step=after_step)
            summaries.append(s)
            reporter.say(f"{spec.train:<10} lr={spec.lr:g} seed={spec.seed}: accuracy {s['initial_acc']:.4f} "
                         f"-> {s['final_acc']:.4f} ({s['trainable_params']:,} trainable parameters)")
        rows = aggregate(summaries, opts.components)
        result = {"runs": summaries, "table": rows, "table_text": format_table(rows)}
        if dctx.is_main and len(specs) > 1:
            config = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
            write_json_atomic(out / "grid_summary.json", {"config": config, **result})
            if opts.plots:
                from .plots import plot_grid

                plot_grid(rows, out / "plots")
        reporter.say(result["table_text"])
        return result
    finally:
        dctx.close()
