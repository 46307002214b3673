"""Options of ``vitplast finetune``: defaults, validation (:func:`resolve_options`) and the CLI arguments.

Every option has a CLI flag (dashes) and a keyword of :func:`vitplast.finetune.finetune` (underscores);
``--train``, ``--lr`` and ``--seed`` take comma-separated values that form a grid. Keys starting with
``_`` are test hooks passed through unchecked (``_say``: the print function, ``_stop_after``: stop as if
killed after that many iterations).
"""

from __future__ import annotations

import argparse
import math

from ..common.arg_types import check_seed, check_steps, model_arg, setup_parser
from ..common.device import check_device
from ..common.model_builder import DIGITS_MODEL, check_digits_options
from ..common.paths import check_out_dir
from .log import tensorboard_writer_class
from .trainable import COMPONENTS, TRAIN_CHOICES, parse_train

OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "cosine")
AMP_CHOICES = ("none", "bf16")

DEFAULTS: dict = {
    "model": DIGITS_MODEL,
    "model_kwargs": {},
    "weights": None,
    "data": "digits:5-9",
    "img_size": None,
    "train": ",".join(COMPONENTS),
    "budget": None,
    "auto_batches": 4,
    "lora_r": 8,
    "optimizer": "adam",
    "lr": "1e-3",
    "weight_decay": 0.0,
    "schedule": "cosine",
    "warmup": 0,
    "grad_clip": None,
    "steps": 150,
    "batch_size": 64,
    "seed": "0",
    "amp": "none",
    "device": "auto",
    "eval_every": 0,
    "eval_limit": 0,
    "monitor_every": 10,
    "probe": 0,
    "checkpoint_every": 50,
    "out": None,
    "resume": False,
    "tensorboard": False,
    "export": False,
    "progress": None,
    "plots": True,
    "workers": 0,
    "compile": None,
}
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _split(value, cast, name: str) -> list:
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out = []
    for item in items:
        text = str(item).strip()
        if not text:
            raise ValueError(f"--{name}: empty value in {value!r}")
        try:
            out.append(cast(text) if isinstance(item, str) else cast(item))
        except ValueError:
            raise ValueError(f"--{name}: cannot read {text!r} as {cast.__name__}") from None
    return out


def resolve_options(options: dict) -> dict:
    """Defaults filled in and every option validated; raises ValueError naming the option."""
    unknown = sorted(k for k in options if k not in DEFAULTS and not k.startswith("_"))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; known: {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None or k == "grad_clip"}}
    if cfg["out"] is None:
        raise ValueError("--out DIR is required: the run directory (config, metrics, checkpoints, plots)")
    cfg["out"] = str(cfg["out"])
    trains = _split(cfg["train"], str, "train")
    for t in trains:
        parse_train(t)
    lrs = _split(cfg["lr"], float, "lr")
    seeds = _split(cfg["seed"], int, "seed")
    if any(not (lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise ValueError(f"--lr must be positive, got {cfg['lr']}")
    for s in seeds:
        check_seed(s)
    cfg["train"], cfg["lr"], cfg["seed"] = trains, lrs, seeds
    for key in ("steps", "batch_size", "lora_r", "auto_batches"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise ValueError(f"--{key.replace('_', '-')} must be a positive integer, got {cfg[key]!r}")
    check_steps(cfg["steps"])
    check_out_dir(cfg["out"])
    for key in ("eval_every", "monitor_every", "probe", "checkpoint_every", "warmup", "eval_limit",
                "workers"):
        if not isinstance(cfg[key], int) or cfg[key] < 0:
            raise ValueError(f"--{key.replace('_', '-')} must be an integer >= 0, got {cfg[key]!r}")
    if cfg["optimizer"] not in OPTIMIZERS:
        raise ValueError(f"--optimizer must be one of {OPTIMIZERS}, got {cfg['optimizer']!r}")
    if cfg["schedule"] not in SCHEDULES:
        raise ValueError(f"--schedule must be one of {SCHEDULES}, got {cfg['schedule']!r}")
    if cfg["compile"] is not None and cfg["compile"] not in COMPILE_MODES:
        raise ValueError(f"--compile must be one of {COMPILE_MODES}, got {cfg['compile']!r}")
    if cfg["amp"] not in AMP_CHOICES:
        raise ValueError(f"--amp must be one of {AMP_CHOICES}, got {cfg['amp']!r}")
    if cfg["grad_clip"] is not None and not cfg["grad_clip"] > 0:
        raise ValueError(f"--grad-clip must be positive (or omitted), got {cfg['grad_clip']}")
    if cfg["probe"] % 2:
        raise ValueError(f"--probe must be an even number of images (pairs = halves), got {cfg['probe']}")
    if cfg["monitor_every"] and not cfg["probe"] and cfg["batch_size"] % 2:
        raise ValueError(
            f"--batch-size must be even to monitor on the training batch (pairs = its halves), got "
            f"{cfg['batch_size']}; or pass --probe N"
        )
    if any(parse_train(t) in (("auto",), ("auto@layer",)) for t in trains):
        if cfg["budget"] is None:
            raise ValueError("--train auto needs --budget N (the number of trainable parameters allowed)")
        if not isinstance(cfg["budget"], int) or cfg["budget"] < 1:
            raise ValueError(f"--budget must be a positive integer, got {cfg['budget']!r}")
    elif cfg["budget"] is not None:
        raise ValueError("--budget only applies to --train auto")
    if cfg["weight_decay"] < 0:
        raise ValueError(f"--weight-decay must be >= 0, got {cfg['weight_decay']}")
    try:
        check_device(str(cfg["device"]))
    except ValueError as exc:
        raise ValueError(f"--device: {exc}") from None
    if cfg["tensorboard"]:
        tensorboard_writer_class()  # fail before any directory is made
    if any(parse_train(t) == ("lora",) for t in trains):
        from .trainable import _import_peft

        _import_peft()
    if cfg["model"] == DIGITS_MODEL:
        check_digits_options(cfg["model_kwargs"], cfg["img_size"])
    if not isinstance(cfg["model_kwargs"], dict):
        raise ValueError(f"model_kwargs must be a dict, got {type(cfg['model_kwargs']).__name__}")
    return cfg


def add_arguments(p: argparse.ArgumentParser) -> None:
    setup_parser(p)  # a bad value: one line and exit status 2, not the usage block
    d = DEFAULTS
    g = p.add_argument_group("model and data")
    g.add_argument("--model", default=d["model"],
                   help=f"timm model name, or {DIGITS_MODEL!r} (the embedded ViT pretrained on digits 0-4)")
    g.add_argument("--model-arg", action="append", type=model_arg, default=[], metavar="KEY=VALUE",
                   help="extra timm.create_model argument (repeatable), e.g. patch_size=4")
    g.add_argument("--weights", help="local pretrained checkpoint (.safetensors, .pth, .npz)")
    g.add_argument("--data", default=d["data"],
                   help="digits[:CLASSES], synthetic, cifar10:DIR, cifar100:DIR or an ImageFolder DIR")
    g.add_argument("--img-size", type=int, help="input size (default: the model's)")
    g = p.add_argument_group("what to train (comma-separated values form a grid)")
    g.add_argument("--train", default=d["train"],
                   help=f"one or more of {', '.join(TRAIN_CHOICES)}; join components with +; "
                   "COMPONENT@LAYERS trains some layers only (MHA@3, FC1@0-2, MHA@-1 = the last); "
                   "auto@layer picks (component, layer) units (default: %(default)s)")
    g.add_argument("--budget", type=int, help="trainable-parameter budget of --train auto / auto@layer")
    g.add_argument("--auto-batches", type=int, default=d["auto_batches"],
                   help="batches measured by --train auto (default: %(default)s)")
    g.add_argument("--lora-r", type=int, default=d["lora_r"], help="LoRA rank of --train lora")
    g = p.add_argument_group("optimisation")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default=d["optimizer"], help="sgd has momentum 0.9")
    g.add_argument("--lr", default=d["lr"], help="learning rate(s), comma-separated (default: %(default)s)")
    g.add_argument("--weight-decay", type=float, default=d["weight_decay"])
    g.add_argument("--schedule", choices=SCHEDULES, default=d["schedule"])
    g.add_argument("--warmup", type=int, default=d["warmup"], help="linear warm-up iterations")
    g.add_argument("--grad-clip", type=float, help="clip the global gradient norm to this value")
    g.add_argument("--steps", type=int, default=d["steps"], help="optimiser steps (default: %(default)s)")
    g.add_argument("--batch-size", type=int, default=d["batch_size"],
                   help="images per optimiser step, over all processes (default: %(default)s)")
    g.add_argument("--seed", default=d["seed"], help="seed(s), comma-separated (default: %(default)s)")
    g.add_argument("--amp", choices=AMP_CHOICES, default=d["amp"], help="autocast precision")
    g.add_argument("--device", default=d["device"], help="auto, cpu, cuda, cuda:N (default: %(default)s)")
    g.add_argument("--workers", type=int, default=d["workers"], help="data-loading processes")
    g.add_argument("--compile", nargs="?", const="default", default=d["compile"], choices=COMPILE_MODES,
                   help="train under torch.compile (optionally a mode; reduce-overhead = CUDA graphs); the "
                   "plasticity monitor is attached before compiling and traces into the graph")
    g = p.add_argument_group("monitoring and outputs")
    g.add_argument("--monitor-every", type=int, default=d["monitor_every"],
                   help="record plasticity and gradient norms every K steps (0 = off; default: %(default)s)")
    g.add_argument("--probe", type=int, default=d["probe"],
                   help="monitor on a fixed probe batch of N training images instead of the training batch")
    g.add_argument("--eval-every", type=int, default=d["eval_every"],
                   help="validation accuracy every K steps (0 = at the end only)")
    g.add_argument("--eval-limit", type=int, default=d["eval_limit"], help="validate on the first N images")
    g.add_argument("--checkpoint-every", type=int, default=d["checkpoint_every"])
    g.add_argument("--out", required=True, help="run directory (a grid writes one sub-directory per run)")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    g.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard logs (needs tensorboard): every row of metrics.jsonl")
    g.add_argument("--export", action="store_true",
                   help="write the finetuned weights to RUN/model.safetensors (LoRA merged) and, for --train "
                   "lora, the peft adapter to RUN/adapter/; with --resume, also for a finished run")
    g.add_argument("--no-plots", dest="plots", action="store_false")
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="force the progress bar (default: when stderr is a terminal)")
    g.add_argument("--no-progress", dest="progress", action="store_false")


def options_from_args(args: argparse.Namespace) -> dict:
    opts = {k: getattr(args, k) for k in DEFAULTS if k != "model_kwargs" and hasattr(args, k)}
    opts["model_kwargs"] = dict(getattr(args, "model_arg", []) or [])
    return opts
