"""Options of `vitplast claim`, declared once (:class:`ClaimOptions`): the model, data, optimisation and
runtime groups it shares with finetune (:mod:`vitplast.options.groups`) and its own. The CLI flags,
defaults, checks and error wording all come from it.

Every problem is a ``ValueError`` whose message names the option (the CLI prints it on one line and
exits with status 2) and is found before anything is measured or trained.
"""

from __future__ import annotations

import dataclasses
import os

from ..finetune import TRAIN_ORDER, RunSettings
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
    settle,
)
from ..options.groups import GROUP_TITLES, DataOptions, ModelOptions, OptimOptions, RuntimeOptions
from ..options.parsing import MAX_SEED, MAX_STEPS
from ..runs.paths import check_out_dir, foreign_files

PROTOCOLS = ("in_situ", "decomposition")
BASELINES = ("head", "initial")
GRANULARITIES = ("component", "layer")
COMPONENT_STEPS, LAYER_STEPS = 100, 60  # default --steps per granularity
LR_GRID = "3e-3,1e-2,3e-2"
# a layer claim's short runs train one unit each: its grid starts one step higher
LAYER_LR_GRID = "1e-2,3e-2,1e-1"
GROUPS = {**GROUP_TITLES, "pairs": "plasticity before finetuning",
          "train": "finetuning (the same budget for every component)", "out": "statistics and outputs"}
SHARED_GROUPS = (ModelOptions, DataOptions, OptimOptions, RuntimeOptions)


def _component(name):
    lookup = {c.lower(): c for c in TRAIN_ORDER}
    if str(name).lower() not in lookup:
        raise ValueError(f"unknown {name!r}; choose from {', '.join(TRAIN_ORDER)}")
    return lookup[str(name).lower()]


_LRS = csv(number(positive=True), unique=True)


def _lr_text(text: str):
    return "auto" if text.strip().lower() == "auto" else _LRS.parse(text)


def _lr_check(value):
    return "auto" if isinstance(value, str) and value.strip().lower() == "auto" else _LRS.check(value)


@dataclasses.dataclass(frozen=True)
class ClaimOptions(RuntimeOptions, OptimOptions, DataOptions, ModelOptions):  # fields: model first
    data: str = option("digits:5-9", "Y, the downstream data: pairs and finetuning (default: %(default)s); "
                       "ImageFolder DIR, digits:CLASSES, cifar10:DIR, cifar100:DIR", metavar="SPEC",
                       group="data")
    steps: int | None = option(None, f"steps per run (default: {COMPONENT_STEPS}; {LAYER_STEPS} with "
                               "--granularity layer)", group="optim", kind=optional(integer(1, MAX_STEPS)))
    pretrain_data: str = option("digits:0-4", "X, the pretraining-side data of the matched pairs (default: "
                                "%(default)s)", metavar="SPEC", group="data")
    protocol: str = option("in_situ", group="pairs", kind=choice(PROTOCOLS))
    pairs: int = option(512, "matched X-Y pairs (default: %(default)s)", group="pairs", kind=integer(1))
    pair_batch: int = option(16, "pairs per forward, the bootstrap's resampling unit (default: %(default)s)",
                             group="pairs", kind=integer(1))
    split: str = option("all", "split the pairs come from (default: %(default)s)", group="pairs",
                        kind=choice(("train", "val", "all")))
    measure_seed: int = option(0, "order of the pairs", group="pairs", kind=integer(0, MAX_SEED))
    components: list = option(",".join(TRAIN_ORDER), "components trained alone (default: %(default)s)",
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
    lr: list | str | None = option(
        None, f"learning-rate grid; each train keeps its best (default: {LR_GRID}; {LAYER_LR_GRID} with "
        "--granularity layer); auto: that grid, widened x3 (at most twice per side) for a train whose best "
        "lr is at an edge", group="train", kind=optional(Kind(_lr_text, _lr_check)))
    seed: list = option("0,1,2", "seeds (default: %(default)s)", group="train",
                        kind=csv(integer(0, MAX_SEED), unique=True))
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
    calibrate_steps: int = option(10, kind=integer(1), cli=False)
    lr_auto: bool = option(False, cli=False)  # set by validate: --lr auto was given (lr is then the grid)

    def validate(self) -> None:
        """What involves several options, the machine or the file system."""
        if self.out is None:
            raise OptionError("--out DIR is required: it holds the finetuning runs and the reports")
        settle(self, out=str(self.out))
        if self.steps is None:  # a layer claim trains 4-5x more runs: fewer steps keep it in budget
            settle(self, steps=LAYER_STEPS if self.granularity == "layer" else COMPONENT_STEPS)
        if self.lr is None or self.lr == "auto":
            settle(self, lr_auto=self.lr == "auto", lr=_LRS.parse(default_lrs(self.granularity)))
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
        self.run_settings(progress=False).validate()  # what finetune refuses (--amp fp16, odd batches)

    def run_settings(self, *, progress: bool | None) -> RunSettings:
        """The settings of every finetuning run of the claim: the shared groups as given, no plasticity
        monitor, plots only with ``--run-plots``."""
        shared = {f.name: getattr(self, f.name) for g in SHARED_GROUPS for f in dataclasses.fields(g)}
        return RunSettings(**{**shared, "progress": progress}, eval_limit=self.eval_limit,
                           checkpoint_every=self.checkpoint_every, monitor_every=0, plots=self.run_plots)

    def record(self, **resolved) -> dict:
        """The options as claim.json records them (``resolved``: values decided at run time, e.g. jobs)."""
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, **resolved}


def default_lrs(granularity: str) -> str:
    return LAYER_LR_GRID if granularity == "layer" else LR_GRID


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
