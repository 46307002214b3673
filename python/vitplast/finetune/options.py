"""Options of ``vitplast finetune``, declared once: `RunSettings` (what every run of a grid shares: the model,
data, optimisation and runtime groups of `vitplast.options.groups`, plus what to monitor and write) and
`FinetuneOptions` (the settings plus the grid: ``--train``, ``--lr``, ``--seed``, ``--out``, ``--resume``).
The CLI flags, defaults, checks and error wording all come from these classes (`vitplast.options.fields`).
"""

from __future__ import annotations

import dataclasses

from ..models.families import family_of
from ..options import parsing
from ..options.fields import (
    Kind,
    OptionError,
    checked,
    choice,
    csv,
    fail_on,
    fields_of,
    integer,
    number,
    option,
    optional,
    settle,
)
from ..options.groups import GROUP_TITLES, DataOptions, ModelOptions, OptimOptions, RuntimeOptions
from ..outputs.paths import check_out_dir
from ..runs.executors import GRID_TITLE, ExecutorOptions
from ..runtime.environment import world
from .log import tensorboard_writer_class
from .lora import import_peft, lora_target_parts
from .selection import SPECIAL, TRAIN_CHOICES, TRAIN_ORDER, TrainPlan, check_train_syntax

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
TRAIN_AMP = ("none", "bf16")  # fp16 autocast would need loss scaling
GROUPS = {**GROUP_TITLES, "train": "what to train (comma-separated values form a grid)",
          "out": "monitoring and outputs", **GRID_TITLE}


@dataclasses.dataclass(frozen=True)
class RunSettings(RuntimeOptions, OptimOptions, DataOptions, ModelOptions):  # fields: model first
    """What one finetuning run needs besides its (train, lr, seed) and directory (`RunSpec`)."""

    components: dict | None = option(
        None, "a component as a glob over module names ('*' = the layer index, '**' = any prefix; repeat a "
        "label for a component of several modules); replaces the presets, so --train names these labels "
        "(--train lora targets MHA unless --lora-targets says otherwise)", flag="--component",
        action="append", metavar="LABEL=GLOB", group="train",
        kind=Kind(parsing.component, parsing.component_option))
    budget: int | None = option(None, "trainable-parameter budget of --train auto", group="train",
                                kind=optional(integer(1)))
    auto_batches: int = option(4, "batches measured by --train auto (default: %(default)s)", group="train",
                               kind=integer(1))
    lora_r: int = option(8, "LoRA rank of --train lora", group="train", kind=integer(1))
    lora_targets: str | None = option(
        None, "what --train lora adapts: components of the map joined with +, each optionally restricted "
        "to layers (MHA@2-3+FC1; their linear layers get adapters; default: MHA)", group="train",
        kind=optional(checked(check_train_syntax)), metavar="SPEC")
    compile: str | None = option(
        None, "train under torch.compile (optionally a mode; reduce-overhead = CUDA graphs); the plasticity "
        "monitor is attached before compiling and traces into the graph", group="runtime", nargs="?",
        const="default", kind=optional(choice(COMPILE_MODES)))
    monitor_every: int = option(10, "record plasticity and gradient norms every K steps (0 = off; default: "
                                "%(default)s)", group="out", kind=integer(0))
    probe: int = option(0, "monitor on a fixed probe batch of N training images instead of the training "
                        "batch", group="out", kind=integer(0))
    eval_every: int = option(0, "validation accuracy every K steps (0 = at the end only)", group="out",
                             kind=integer(0))
    eval_limit: int = option(0, "validate on the first N images (of the held-out ones too, with --holdout)",
                             group="out", kind=integer(0))
    checkpoint_every: int = option(50, group="out", kind=integer(0))
    tensorboard: bool = option(False, "also write TensorBoard logs (needs tensorboard): every row of "
                               "metrics.jsonl", group="out", action="store_true")
    export: bool = option(False, "write the finetuned weights to RUN/model.safetensors (LoRA merged) and, "
                          "for --train lora, the peft adapter to RUN/adapter/; with --resume, also for a "
                          "finished run", group="out", action="store_true")
    plots: bool = option(True, flag="--no-plots", group="out", action="store_false")

    def validate(self) -> None:
        """The checks of the settings alone (`FinetuneOptions.validate` adds the grid's)."""
        if self.amp not in TRAIN_AMP:
            raise OptionError(f"--amp {self.amp}: finetuning takes {' or '.join(TRAIN_AMP)} (fp16 autocast "
                              "needs loss scaling)")
        if self.probe % 2:
            raise OptionError(f"--probe: must be an even number of images (pairs = halves), got {self.probe}")
        if self.monitor_every and not self.probe and self.batch_size % 2:
            raise OptionError(f"--batch-size {self.batch_size}: must be even to monitor on the training "
                              "batch (pairs = its halves); or pass --probe N")
        if self.tensorboard:
            fail_on("--tensorboard", tensorboard_writer_class)  # fail before any directory is made
        family_of(self.model).check_options(self.model_kwargs, self.img_size)


@dataclasses.dataclass(frozen=True)
class FinetuneOptions(ExecutorOptions, RunSettings):
    """The options of ``vitplast finetune`` (and of `vitplast.finetune.finetune`): the settings every run
    shares, the grid, and where its runs train (`ExecutorOptions`)."""

    train: list = option(",".join(TRAIN_ORDER), f"one or more of {', '.join(TRAIN_CHOICES)}, auto@layer; "
                         "join components with +; LABEL@LAYERS trains only those layers (MHA@3, FC1@0-2, "
                         "MHA@-1; default: %(default)s)", group="train",
                         kind=csv(checked(check_train_syntax)))
    lr: list = option("1e-3", "learning rate(s), comma-separated (default: %(default)s)", group="optim",
                      kind=csv(number(positive=True)))
    seed: list = option("0", "seed(s), comma-separated (default: %(default)s)", group="optim",
                        kind=csv(integer(0, parsing.MAX_SEED)))
    out: str | None = option(None, "run directory (a grid writes one sub-directory per run)", group="out",
                             required=True)
    resume: bool = option(False, "continue the run in --out from its last checkpoint", group="out",
                          action="store_true")

    def validate(self) -> None:
        if self.out is None:
            raise OptionError("--out DIR is required: the run directory (config, metrics, checkpoints, "
                              "plots)")
        settle(self, out=str(self.out))
        check_out_dir(self.out)
        RunSettings.validate(self)
        settle(self, train=check_trains(self, self.train))
        self.validate_executor()
        if self.shard_env and len(self.train) * len(self.lr) * len(self.seed) == 1:
            settle(self, shard=None, shard_env=False)  # one run per array task: the task's own choice
        if world()[0] > 1 and (self.jobs or 1) > 1:
            raise OptionError("--jobs must be 1 under torchrun (each run is already data-parallel)")
        if self.analyse_only and len(self.train) * len(self.lr) * len(self.seed) == 1:
            raise OptionError("--analyse-only applies to a grid (several --train, --lr or --seed values)")

    def settings(self) -> RunSettings:
        """The settings every run of this grid shares."""
        return RunSettings(**fields_of(RunSettings, self))


def check_trains(settings: RunSettings, trains: list[str]) -> list[TrainPlan]:
    """The `TrainPlan` of every ``--train`` value (parsed here, once), checked with what they ask of the other
    options (``--budget``, ``--lora-targets``, peft)."""
    try:
        plans = [TrainPlan.parse(t, settings.components) for t in trains]
    except ValueError as exc:
        raise OptionError(f"--train: {exc}") from None
    if any(p.is_auto for p in plans):
        if settings.budget is None:
            raise OptionError("--train auto needs --budget N (the number of trainable parameters allowed)")
    elif settings.budget is not None:
        raise OptionError("--budget only applies to --train auto")
    if settings.lora_targets is not None:
        if not any(p.is_lora for p in plans):
            raise OptionError("--lora-targets only applies to --train lora")
        try:
            targets = lora_target_parts(settings.lora_targets, settings.components)
        except ValueError as exc:
            raise OptionError(f"--lora-targets: {exc}") from None
        if any(t.split("@")[0] in SPECIAL for t in targets):
            raise OptionError(f"--lora-targets {settings.lora_targets}: components only (e.g. MHA, MHA@2-3, "
                              "MHA+FC1), not full, head, lora or auto")
    if any(p.is_lora for p in plans):
        fail_on("--train lora", import_peft)
    return plans
