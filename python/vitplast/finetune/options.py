"""Options of ``vitplast finetune``, declared once (:class:`FinetuneOptions`, through
:mod:`vitplast.options.fields`): the CLI flags, defaults, checks and error wording all come from it.

Every option has a CLI flag (dashes) and a keyword of :func:`vitplast.finetune.finetune` (underscores);
``--train``, ``--lr`` and ``--seed`` take comma-separated values that form a grid. Keys starting with
``_`` are test hooks passed through unchecked (``_say``: the print function, ``_stop_after``: stop as if
killed after that many iterations).
"""

from __future__ import annotations

import argparse
import dataclasses

from ..options.parsing import MAX_SEED, MAX_STEPS, component, component_option, model_arg, setup_parser
from ..runtime.device import check_device
from ..models.builder import DIGITS_MODEL, check_digits_options
from ..options.fields import (
    Kind,
    OptionError,
    checked,
    choice,
    csv,
    fail_on,
    integer,
    number,
    option,
    optional,
    resolve,
    values_of,
)
from ..options.fields import add_arguments as add_options
from ..runs.paths import check_out_dir
from .log import tensorboard_writer_class
from .trainable import COMPONENTS, SPECIAL, TRAIN_CHOICES, check_train_syntax, lora_target_parts, parse_train

OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "cosine")
AMP_CHOICES = ("none", "bf16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
GROUPS = {"data": "model and data", "train": "what to train (comma-separated values form a grid)",
          "optim": "optimisation", "out": "monitoring and outputs"}


def _model_kwargs(value) -> dict:
    """``--model-arg`` values (``KEY=VALUE`` pairs) or a dict, as the model's constructor kwargs."""
    if isinstance(value, dict):
        return value
    if isinstance(value, (list, tuple)):
        return dict(model_arg(v) if isinstance(v, str) else tuple(v) for v in value)
    raise ValueError(f"must be a dict, got {type(value).__name__}")


@dataclasses.dataclass
class FinetuneOptions:
    model: str = option(DIGITS_MODEL, f"timm model name, or {DIGITS_MODEL!r} (the embedded ViT pretrained on "
                        "digits 0-4)", group="data")
    model_kwargs: dict = option(help="extra timm.create_model argument (repeatable), e.g. patch_size=4",
                                flag="--model-arg", action="append", metavar="KEY=VALUE", group="data",
                                kind=Kind(str, _model_kwargs), default_factory=dict)
    weights: str | None = option(None, "local pretrained checkpoint (.safetensors, .pth, .npz)", group="data")
    data: str = option("digits:5-9", "digits[:CLASSES], synthetic, cifar10:DIR, cifar100:DIR or an "
                       "ImageFolder DIR", group="data")
    img_size: int | None = option(None, "input size (default: the model's)", group="data",
                                  kind=optional(integer(1)))
    train: list = option(",".join(COMPONENTS), f"one or more of {', '.join(TRAIN_CHOICES)}, auto@layer; join "
                         "components with +; LABEL@LAYERS trains only those layers (MHA@3, FC1@0-2, MHA@-1; "
                         "default: %(default)s)", group="train", kind=csv(checked(check_train_syntax)))
    components: dict | None = option(
        None, "a component as a glob over module names ('*' = the layer index, '**' = any prefix; repeat a "
        "label for a component of several modules); replaces the presets, so --train names these labels "
        "(--train lora targets MHA unless --lora-targets says otherwise)", flag="--component",
        action="append", metavar="LABEL=GLOB", group="train", kind=Kind(component, component_option))
    budget: int | None = option(None, "trainable-parameter budget of --train auto", group="train",
                                kind=optional(integer(1)))
    auto_batches: int = option(4, "batches measured by --train auto (default: %(default)s)", group="train",
                               kind=integer(1))
    lora_r: int = option(8, "LoRA rank of --train lora", group="train", kind=integer(1))
    lora_targets: str | None = option(
        None, "what --train lora adapts: components of the map joined with +, each optionally restricted "
        "to layers (MHA@2-3+FC1; their linear layers get adapters; default: MHA)", group="train",
        kind=optional(checked(check_train_syntax)), metavar="SPEC")
    optimizer: str = option("adam", "sgd has momentum 0.9", group="optim", kind=choice(OPTIMIZERS))
    lr: list = option("1e-3", "learning rate(s), comma-separated (default: %(default)s)", group="optim",
                      kind=csv(number(positive=True)))
    weight_decay: float = option(0.0, group="optim", kind=number(minimum=0.0))
    schedule: str = option("cosine", group="optim", kind=choice(SCHEDULES))
    warmup: int = option(0, "linear warm-up iterations", group="optim", kind=integer(0))
    grad_clip: float | None = option(None, "clip the global gradient norm to this value", group="optim",
                                     kind=optional(number(positive=True)))
    steps: int = option(150, "optimiser steps (default: %(default)s)", group="optim",
                        kind=integer(1, MAX_STEPS))
    batch_size: int = option(64, "images per optimiser step, over all processes (default: %(default)s)",
                             group="optim", kind=integer(1))
    seed: list = option("0", "seed(s), comma-separated (default: %(default)s)", group="optim",
                        kind=csv(integer(0, MAX_SEED)))
    amp: str = option("none", "autocast precision", group="optim", kind=choice(AMP_CHOICES))
    device: str = option("auto", "auto, cpu, cuda, cuda:N (default: %(default)s)", group="optim",
                         kind=checked(check_device))
    workers: int = option(0, "data-loading processes", group="optim", kind=integer(0))
    compile: str | None = option(
        None, "train under torch.compile (optionally a mode; reduce-overhead = CUDA graphs); the plasticity "
        "monitor is attached before compiling and traces into the graph", group="optim", nargs="?",
        const="default", kind=optional(choice(COMPILE_MODES)))
    monitor_every: int = option(10, "record plasticity and gradient norms every K steps (0 = off; default: "
                                "%(default)s)", group="out", kind=integer(0))
    probe: int = option(0, "monitor on a fixed probe batch of N training images instead of the training "
                        "batch", group="out", kind=integer(0))
    eval_every: int = option(0, "validation accuracy every K steps (0 = at the end only)", group="out",
                             kind=integer(0))
    eval_limit: int = option(0, "validate on the first N images", group="out", kind=integer(0))
    checkpoint_every: int = option(50, group="out", kind=integer(0))
    out: str | None = option(None, "run directory (a grid writes one sub-directory per run)", group="out",
                             required=True)
    resume: bool = option(False, "continue the run in --out from its last checkpoint", group="out",
                          action="store_true")
    tensorboard: bool = option(False, "also write TensorBoard logs (needs tensorboard): every row of "
                               "metrics.jsonl", group="out", action="store_true")
    export: bool = option(False, "write the finetuned weights to RUN/model.safetensors (LoRA merged) and, "
                          "for --train lora, the peft adapter to RUN/adapter/; with --resume, also for a "
                          "finished run", group="out", action="store_true")
    plots: bool = option(True, flag="--no-plots", group="out", action="store_false")
    progress: bool | None = option(None, "force the progress bar (default: when stderr is a terminal)",
                                   group="out", action="store_true", negation="--no-progress")

    def validate(self) -> None:
        """What involves several options, or more than the value (imports, the file system)."""
        if self.out is None:
            raise OptionError("--out DIR is required: the run directory (config, metrics, checkpoints, "
                              "plots)")
        self.out = str(self.out)
        check_out_dir(self.out)
        if self.probe % 2:
            raise OptionError(f"--probe: must be an even number of images (pairs = halves), got {self.probe}")
        if self.monitor_every and not self.probe and self.batch_size % 2:
            raise OptionError(f"--batch-size {self.batch_size}: must be even to monitor on the training "
                              "batch (pairs = its halves); or pass --probe N")
        try:
            parsed = [parse_train(t, self.components) for t in self.train]
        except ValueError as exc:
            raise OptionError(f"--train: {exc}") from None
        if any(p in (("auto",), ("auto@layer",)) for p in parsed):
            if self.budget is None:
                raise OptionError("--train auto needs --budget N (the number of trainable parameters "
                                  "allowed)")
        elif self.budget is not None:
            raise OptionError("--budget only applies to --train auto")
        if self.tensorboard:
            fail_on("--tensorboard", tensorboard_writer_class)  # fail before any directory is made
        if self.lora_targets is not None:
            if not any(p == ("lora",) for p in parsed):
                raise OptionError("--lora-targets only applies to --train lora")
            try:
                targets = lora_target_parts(self.lora_targets, self.components)
            except ValueError as exc:
                raise OptionError(f"--lora-targets: {exc}") from None
            if any(t.split("@")[0] in SPECIAL for t in targets):
                raise OptionError(f"--lora-targets {self.lora_targets}: components only (e.g. MHA, MHA@2-3, "
                                  "MHA+FC1), not full, head, lora or auto")
        if any(p == ("lora",) for p in parsed):
            from .trainable import _import_peft

            fail_on("--train lora", _import_peft)
        if self.model == DIGITS_MODEL:
            check_digits_options(self.model_kwargs, self.img_size)


DEFAULTS: dict = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                  for f in dataclasses.fields(FinetuneOptions)}


def resolve_options(options: dict) -> dict:
    """Defaults filled in and every option checked (:class:`FinetuneOptions`); raises ValueError naming
    the option. ``_``-prefixed test hooks pass through."""
    hooks = {k: v for k, v in options.items() if k.startswith("_")}
    opts = resolve(FinetuneOptions, {k: v for k, v in options.items() if not k.startswith("_")})
    return {**{f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}, **hooks}


def add_arguments(p: argparse.ArgumentParser) -> None:
    setup_parser(p)  # a bad value: one line and exit status 2, not the usage block
    add_options(p, FinetuneOptions, GROUPS)


def options_from_args(args: argparse.Namespace) -> dict:
    return values_of(args, FinetuneOptions)
