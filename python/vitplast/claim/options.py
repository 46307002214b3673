"""Options of `vitplast claim`, declared once (:class:`ClaimOptions`, through
:mod:`vitplast.options.fields`): the CLI flags, defaults, checks and error wording all come from it.

Every problem is a ``ValueError`` whose message names the option (the CLI prints it on one line and
exits with status 2) and is found before anything is measured or trained.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from ..options.parsing import MAX_SEED, MAX_STEPS, model_arg, setup_parser
from ..runtime.device import check_device
from ..models.builder import DIGITS_MODEL, check_digits_options
from ..options.fields import (
    Kind,
    OptionError,
    checked,
    choice,
    csv,
    integer,
    number,
    option,
    optional,
    resolve,
    values_of,
)
from ..options.fields import add_arguments as add_options
from ..runs.paths import check_out_dir, foreign_files
from ..finetune import COMPONENTS

PROTOCOLS = ("in_situ", "decomposition")
BASELINES = ("head", "initial")
GRANULARITIES = ("component", "layer")
COMPONENT_STEPS, LAYER_STEPS = 100, 60  # default --steps per granularity
LR_GRID = "3e-3,1e-2,3e-2"
# a layer claim's 60 steps train one unit: on the digits ViT every FC and LN unit and the head picked
# 3e-2, the top of LR_GRID, and no unit picked 3e-3 (README, claim section); its grid is one step higher
LAYER_LR_GRID = "1e-2,3e-2,1e-1"
GROUPS = {"data": "model and data", "pairs": "plasticity before finetuning",
          "train": "finetuning (the same budget for every component)", "out": "statistics and outputs"}
# options passed on unchanged to every finetune run
FINETUNE_KEYS = ("model", "weights", "model_kwargs", "img_size", "data", "optimizer", "weight_decay",
                 "schedule", "steps", "batch_size", "amp", "device", "eval_limit", "checkpoint_every")


def _model_kwargs(value) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, (list, tuple)):
        return dict(model_arg(v) if isinstance(v, str) else tuple(v) for v in value)
    raise ValueError(f"must be a dict, got {type(value).__name__}")


def _component(name):
    lookup = {c.lower(): c for c in COMPONENTS}
    if str(name).lower() not in lookup:
        raise ValueError(f"unknown {name!r}; choose from {', '.join(COMPONENTS)}")
    return lookup[str(name).lower()]


_LRS = csv(number(positive=True), unique=True)


def _lr_text(text: str):
    return "auto" if text.strip().lower() == "auto" else _LRS.parse(text)


def _lr_check(value):
    return "auto" if isinstance(value, str) and value.strip().lower() == "auto" else _LRS.check(value)


@dataclasses.dataclass
class ClaimOptions:
    model: str = option(DIGITS_MODEL, f"timm model name, or {DIGITS_MODEL!r} (default)", group="data")
    model_kwargs: dict = option(help="extra timm.create_model argument (repeatable)", flag="--model-arg",
                                action="append", metavar="KEY=VALUE", group="data",
                                kind=Kind(str, _model_kwargs), default_factory=dict)
    weights: str | None = option(None, "local pretrained checkpoint (.safetensors, .pth, .npz)", group="data")
    img_size: int | None = option(None, "input size (default: the model's)", group="data",
                                  kind=optional(integer(1)))
    pretrain_data: str = option("digits:0-4", "X, the pretraining-side data of the matched pairs (default: "
                                "%(default)s)", metavar="SPEC", group="data")
    data: str = option("digits:5-9", "Y, the downstream data: pairs and finetuning (default: %(default)s); "
                       "ImageFolder DIR, digits:CLASSES, cifar10:DIR, cifar100:DIR", metavar="SPEC",
                       group="data")
    protocol: str = option("in_situ", group="pairs", kind=choice(PROTOCOLS))
    pairs: int = option(512, "matched X-Y pairs (default: %(default)s)", group="pairs", kind=integer(1))
    pair_batch: int = option(16, "pairs per forward, the bootstrap's resampling unit (default: %(default)s)",
                             group="pairs", kind=integer(1))
    split: str = option("all", "split the pairs come from (default: %(default)s)", group="pairs",
                        kind=choice(("train", "val", "all")))
    measure_seed: int = option(0, "order of the pairs", group="pairs", kind=integer(0, MAX_SEED))
    components: list = option(",".join(COMPONENTS), "components trained alone (default: %(default)s)",
                              group="train", kind=csv(checked(_component), unique=True))
    granularity: str = option(
        "component", "component: each component in every layer at once (default); layer: each (component, "
        "layer) alone, plus the plasticity-guided selection against random ones", group="train",
        kind=choice(GRANULARITIES))
    budget: int | None = option(
        None, "--granularity layer: trainable parameters (besides the head) of the selected sets (default: "
        "twice the largest unit)", group="train", kind=optional(integer(1)))
    draws: int = option(3, "--granularity layer: random sets compared with the plasticity-guided one (0: no "
                        "comparison; default: %(default)s)", group="train", kind=integer(0))
    baseline: str = option("head", "gain over the head-only run of the same seed (default) or the initial "
                           "accuracy", group="train", kind=choice(BASELINES))
    optimizer: str = option("adam", group="train", kind=choice(("sgd", "adam")))
    lr: list | str | None = option(
        None, f"learning-rate grid; each train keeps its best (default: {LR_GRID}; {LAYER_LR_GRID} with "
        "--granularity layer); auto: that grid, widened x3 (at most twice per side) for a train whose best "
        "lr is at an edge", group="train", kind=optional(Kind(_lr_text, _lr_check)))
    seed: list = option("0,1,2", "seeds (default: %(default)s)", group="train",
                        kind=csv(integer(0, MAX_SEED), unique=True))
    steps: int | None = option(None, f"steps per run (default: {COMPONENT_STEPS}; {LAYER_STEPS} with "
                               "--granularity layer)", group="train", kind=optional(integer(1, MAX_STEPS)))
    batch_size: int = option(64, group="train", kind=integer(1))
    weight_decay: float = option(0.0, group="train", kind=number(minimum=0.0))
    schedule: str = option("cosine", group="train", kind=choice(("constant", "cosine")))
    amp: str = option("none", group="train", kind=choice(("none", "bf16")))
    device: str = option("auto", "auto, cpu, cuda, cuda:N (default: %(default)s)", group="train",
                         kind=checked(check_device))
    eval_limit: int = option(0, "validate on the first N images", group="train", kind=integer(0))
    checkpoint_every: int = option(50, group="train", kind=integer(0))
    jobs: int | None = option(None, "runs trained at once, in processes (default: 2 for the digits ViT on a "
                              "CPU with 2+ cores, else 1)", group="train", kind=optional(integer(1)))
    threads: int | None = option(None, "intra-op threads per run (default: 1 for the digits ViT on CPU, else "
                                 "torch's)", group="train", kind=optional(integer(1)))
    bootstrap: int = option(2000, "bootstrap replicates", group="out", kind=integer(1))
    permutations: int = option(10000, "random permutations beyond 8 components (up to 8: all of them)",
                               group="out", kind=integer(1))
    stats_seed: int = option(0, group="out", kind=integer(0, MAX_SEED))
    out: str | None = option(None, "directory of the runs and reports (rerun to resume)", group="out",
                             required=True)
    dry_run: bool = option(False, "say how many runs remain and time short runs to estimate how long; train "
                           "nothing", group="out", action="store_true")
    time_budget: float | None = option(None, "estimate first (as --dry-run) and refuse to start beyond this "
                                       "many minutes", metavar="MINUTES", group="out",
                                       kind=optional(number(positive=True)))
    run_plots: bool = option(False, "also draw each run's curves", group="out", action="store_true")
    progress: bool | None = option(None, group="out", action="store_true", negation="--no-progress")
    calibrate_steps: int = option(10, kind=integer(1), cli=False)

    def validate(self) -> None:
        """What involves several options, the machine or the file system."""
        if self.out is None:
            raise OptionError("--out DIR is required: it holds the finetuning runs and the reports")
        self.out = str(self.out)
        if self.steps is None:  # a layer claim trains 4-5x more runs: fewer steps keep it in budget
            self.steps = LAYER_STEPS if self.granularity == "layer" else COMPONENT_STEPS
        if self.lr is None:
            self.lr = _LRS.parse(default_lrs(self.granularity))
        if len(self.components) < 3 and self.granularity != "layer":  # layer: units = components x layers
            raise OptionError(f"--components: a rank correlation needs at least 3 components, got "
                              f"{self.components}")
        if self.jobs is not None and self.jobs > (os.cpu_count() or 1):
            raise OptionError(f"--jobs {self.jobs}: at most one run per core ({os.cpu_count() or 1} on this "
                              "machine)")
        if self.pairs < self.pair_batch:
            raise OptionError(f"--pairs ({self.pairs}) must be at least --pair-batch ({self.pair_batch})")
        if self.granularity == "layer" and self.baseline != "head":
            raise OptionError("--granularity layer compares every unit with the head-only run: --baseline "
                              "head")
        if self.budget is not None and self.granularity != "layer":
            raise OptionError("--budget only applies to --granularity layer (the selected sets' size)")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and (self.jobs or 1) > 1:
            raise OptionError("--jobs must be 1 under torchrun (each run is already data-parallel)")
        if self.model == DIGITS_MODEL:
            check_digits_options(self.model_kwargs, self.img_size)
        check_claim_out(self.out)


DEFAULTS: dict = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                  for f in dataclasses.fields(ClaimOptions)}


def resolve_options(options: dict) -> dict:
    """Defaults filled in and every option checked (:class:`ClaimOptions`); raises ValueError naming
    the option. ``_``-prefixed test hooks pass through; ``lr_auto`` says whether ``--lr auto`` was given
    (``lr`` is then the default grid)."""
    hooks = {k: v for k, v in options.items() if k.startswith("_")}
    opts = resolve(ClaimOptions, {k: v for k, v in options.items() if not k.startswith("_")})
    cfg = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
    cfg["lr_auto"] = cfg["lr"] == "auto"
    if cfg["lr_auto"]:
        cfg["lr"] = _LRS.parse(default_lrs(cfg["granularity"]))
    return {**cfg, **hooks}


def default_lrs(granularity: str) -> str:
    return LAYER_LR_GRID if granularity == "layer" else LR_GRID


def add_arguments(p: argparse.ArgumentParser) -> None:
    setup_parser(p, defaults_in_help=False)  # bad input: one line on stderr, exit status 2
    add_options(p, ClaimOptions, GROUPS)


def options_from_args(args: argparse.Namespace) -> dict:
    return values_of(args, ClaimOptions)


# what a claim writes into OUT (and nothing else: another directory is refused, never written into)
CLAIM_FILES = frozenset({"runs", "plasticity_chunks.json", "claim.json", "claim.txt", "claim.png"})


def check_claim_out(out: str) -> None:
    """``--out``: a new or empty directory, or one a claim wrote (its files only); ValueError otherwise."""
    check_out_dir(out)
    foreign = [n for n in foreign_files(out, CLAIM_FILES) if not n.startswith(".")]  # hidden: temporaries
    if foreign:
        raise ValueError(f"--out {out!r} holds files a claim did not write ({', '.join(foreign[:5])}"
                         f"{' ...' if len(foreign) > 5 else ''}): give a new or empty directory, or one an "
                         "earlier claim wrote")
