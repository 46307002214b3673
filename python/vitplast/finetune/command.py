"""Finetune chosen components of a vision transformer, monitoring their plasticity every few steps.

The paper's component-wise protocol: ``--train MHA`` trains attention in every block (plus the head),
``--train FC1``/``FC2``/``LN1``/``LN2`` likewise; ``MHA@3``, ``FC1@0-2``, ``MHA@-1`` train only those
layers, and ``+`` joins parts (``MHA@-1+FC1@-1``). ``full``, ``head`` (linear probing) and ``lora``
(peft LoRA on attention) are the baselines; ``auto --budget N`` measures plasticity first and trains
the most plastic components that fit N trainable parameters (``auto@layer``: the most plastic
(component, layer) units). Components come from the same map ``vitplast measure`` uses: the model's
preset, or ``--component LABEL=GLOB`` (repeatable), whose labels ``--train`` then names. Comma-separated
``--train``, ``--lr`` and ``--seed`` values form a grid, run in sequence and aggregated into mean +- std
accuracy per trained component.

Defaults are the embedded example: the digits ViT pretrained on digits 0-4 (``--model digits-vit``)
finetuned on digits 5-9, each of the five components in turn:

    vitplast finetune --out runs/digits

Each run directory holds config.json, metrics.jsonl (monitor, eval and train records: the training
loss of every step), checkpoint.pt (atomic), summary.json (finished marker), plots/, tb/ with
``--tensorboard`` (every row) and model.safetensors (+ adapter/ for LoRA) with ``--export``.
``--resume`` continues a killed run exactly, with every metrics row once; a finished directory is never
overwritten, and a directory another process is writing is refused (a lock left by a killed run is
taken over). Under ``torchrun --nproc-per-node N`` the run is
data-parallel (gloo on CPU, nccl on GPU) and metrics and plasticity are combined over ranks.

This module runs the grid (:func:`finetune`) and the CLI (:func:`run`); the parts live beside it in
``vitplast.finetune``: ``options`` (defaults, validation, CLI flags), ``preflight`` (checks that need
the model, before any file), ``selection`` and ``trainable`` (what ``--train`` selects), ``data``
(batches, validation pass), ``model`` (model, device, optimiser), ``loop`` (one run),
``step_recorder`` (what a monitored step records), ``report`` (the grid's table), ``log`` (progress
bar, TensorBoard), ``export`` and ``plots``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..options.parsing import fail
from ..runtime.distributed import init_distributed, silent
from ..runs.rundir import RunDirError, write_json_atomic
from .data import StepBatches, evaluate
from .loop import SimulatedKill, run_one
from .model import build_model
from .options import (
    AMP_CHOICES,
    DEFAULTS,
    OPTIMIZERS,
    SCHEDULES,
    add_arguments,
    options_from_args,
    resolve_options,
)
from .preflight import preflight
from .report import aggregate, format_table

__all__ = [
    "AMP_CHOICES", "DEFAULTS", "OPTIMIZERS", "SCHEDULES", "SimulatedKill", "StepBatches",
    "add_arguments", "aggregate", "build_model", "evaluate", "finetune", "format_table", "options_from_args",
    "resolve_options", "run", "run_name", "run_one",
]


def run_name(train: str, lr: float, seed: int) -> str:
    """The directory name of one run of a grid (``MHA_FC1-lr0.001-s0``); claim names its runs alike."""
    return f"{train.replace('+', '_')}-lr{lr:g}-s{seed}"


def finetune(**options) -> dict:
    """Run the finetuning grid described by ``options`` (the CLI's options, underscores for dashes:
    ``train="MHA,FC1"``, ``lr="1e-3,1e-4"``, ``seed="0,1"``, ``steps=200``, ``out="runs/x"``, ...).

    Returns ``{"runs": [summary per combination], "table": aggregate rows, "table_text": str}``.
    One combination trains into ``out``; several train into ``out/<train>-lr<lr>-s<seed>/`` and
    write ``out/grid_summary.json`` and the grid plots.
    """
    cfg = resolve_options(options)
    preflight(cfg)  # the checks that need the model or the data: before any file is created
    combos = [(t, lr, s) for t in cfg["train"] for lr in cfg["lr"] for s in cfg["seed"]]
    out = Path(cfg["out"])
    say = options.get("_say", print)
    dctx = init_distributed(cfg["device"])
    if not dctx.is_main:
        say = silent
    try:
        if len(combos) > 1 and (out / "grid_summary.json").exists() and not cfg["resume"]:
            raise RunDirError(f"--out {out} already holds a finished grid (grid_summary.json); refusing to "
                              "overwrite it: choose another --out (or pass --resume to load its results)")
        summaries = []
        for train, lr, seed in combos:
            path = out if len(combos) == 1 else out / run_name(train, lr, seed)
            s = run_one(cfg, train, lr, seed, path, dctx, say=say)
            summaries.append(s)
            say(f"{train:<10} lr={lr:g} seed={seed}: accuracy {s['initial_acc']:.4f} -> {s['final_acc']:.4f}"
                f" ({s['trainable_params']:,} trainable parameters)")
        rows = aggregate(summaries, cfg.get("components"))
        text = format_table(rows)
        result = {"runs": summaries, "table": rows, "table_text": text}
        if dctx.is_main and len(combos) > 1:
            public = {k: v for k, v in cfg.items() if not k.startswith("_")}
            write_json_atomic(out / "grid_summary.json", {"config": public, **result})
            if cfg["plots"]:
                from .plots import plot_grid

                plot_grid(rows, out / "plots")
        say(text)
        return result
    finally:
        dctx.close()


def run(args: argparse.Namespace) -> int:
    try:
        finetune(**options_from_args(args))
    except (ValueError, RunDirError, FileNotFoundError, ImportError) as exc:
        return fail("vitplast finetune", exc)
    return 0
