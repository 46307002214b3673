"""Options of `vitplast claim`, declared once (`ClaimOptions`): the model, data, optimisation and
runtime groups it shares with finetune (`vitplast.options.groups`), the executor group
(`vitplast.runs.executors.ExecutorOptions`: ``--executor``, ``--jobs``, ``--shard``, ...) and its
own. The CLI flags, defaults, checks and error wording all come from it.

Every problem is a ``ValueError`` whose message names the option (the CLI prints it on one line and
exits with status 2) and is found before anything is measured or trained.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from ..criteria import CRITERIA
from ..finetune.lora import import_peft
from ..finetune.options import RunSettings
from ..finetune.selection import TRAIN_ORDER
from ..models.families import family_of
from ..options import fields
from ..options.fields import OptionError, choice, csv, integer, option, optional, settle
from ..options.groups import (
    GROUP_TITLES,
    HOLDOUT,
    OPTIMIZERS,
    DataOptions,
    ModelOptions,
    OptimOptions,
    RuntimeOptions,
)
from ..options.parsing import MAX_SEED, MAX_STEPS
from ..outputs.paths import check_out_dir, foreign_files
from ..runs.executors import GRID_TITLE, ExecutorOptions
from ..runtime.environment import world

PROTOCOLS = ("in_situ", "decomposition")
BASELINES = ("head", "initial")
GRANULARITIES = ("component", "layer")
COMPONENT_STEPS, LAYER_STEPS = 100, 60  # default --steps per granularity
# --lr auto's starting grid per optimiser (momentum SGD; Adam and AdamW take steps about 10x smaller),
# starting points inside the range of real finetuning; a model that wants higher or lower rates (the
# digits ViT wants more) is reached by the widening (x3 per step, 4 steps per side)
LR_GRID = {"sgd": "1e-2,3e-2,1e-1", "adamw": "1e-3,3e-3,1e-2", "adam": "1e-3,3e-3,1e-2"}
# a layer claim's short runs train one unit each: its grid starts one step higher
LAYER_LR_GRID = {"sgd": "3e-2,1e-1,3e-1", "adamw": "3e-3,1e-2,3e-2", "adam": "3e-3,1e-2,3e-2"}
DEFAULT_OPTIMIZERS = "sgd,adamw"  # the paper sweeps SGD and Adam
GROUPS = {**GROUP_TITLES, "pairs": "plasticity before finetuning",
          "train": "finetuning (the same budget for every component)", "out": "statistics and outputs",
          **GRID_TITLE}
SHARED_GROUPS = (ModelOptions, DataOptions, OptimOptions, RuntimeOptions)
BASELINE_TRAINS = ("full", "lora", "head")  # trained and reported beside the components, not ranked
DEFAULT_DATA = "digits:5-9"


def _component(name):
    lookup = {c.lower(): c for c in TRAIN_ORDER + BASELINE_TRAINS}
    if str(name).lower() not in lookup:
        raise ValueError(f"unknown {name!r}; choose from {', '.join(TRAIN_ORDER)} and the baselines "
                         f"{', '.join(BASELINE_TRAINS)}")
    return lookup[str(name).lower()]


def _data_specs(value):
    """``--data`` values (repeatable) as a list of distinct dataset specs."""
    values = [value] if isinstance(value, str) else list(value)
    if not values or any(not isinstance(v, str) or not v.strip() for v in values):
        raise ValueError(f"expected dataset specs, got {value!r}")
    values = [v.strip() for v in values]
    if len(set(values)) != len(values):
        raise ValueError(f"repeated dataset in {values}")
    return values


_LRS = csv(fields.number(positive=True), unique=True)


def _grids(grids: dict[str, str]) -> str:
    return "; ".join(f"{name} {grid}" for name, grid in grids.items())


def _lr_text(text: str):
    return "auto" if text.strip().lower() == "auto" else _LRS.parse(text)


def _lr_check(value):
    return "auto" if isinstance(value, str) and value.strip().lower() == "auto" else _LRS.check(value)


@dataclasses.dataclass(frozen=True)
class ClaimOptions(ExecutorOptions, RuntimeOptions, OptimOptions, DataOptions, ModelOptions):  # model first
    data: list | None = option(
        None, f"Y, a downstream dataset: pairs and finetuning (default: {DEFAULT_DATA}); repeat it (or use "
        "--datasets) for one experiment over several: each analysed alone, then all together; ImageFolder "
        "DIR, digits:CLASSES, cifar10:DIR, cifar100:DIR", metavar="SPEC", group="data", action="append",
        kind=optional(fields.Kind(str, _data_specs)))
    datasets: list | None = option(None, "downstream datasets, comma-separated (as repeated --data)",
                                   metavar="SPEC,SPEC", group="data",
                                   kind=optional(csv(fields.checked(str.strip), unique=True)))
    steps: int | None = option(None, f"steps per run (default: {COMPONENT_STEPS}; {LAYER_STEPS} with "
                               "--granularity layer)", group="optim", kind=optional(integer(1, MAX_STEPS)))
    pretrain_data: str = option("digits:0-4", "X, the pretraining-side data of the matched pairs (default: "
                                "%(default)s)", metavar="SPEC", group="data")
    holdout: float = option(
        0.1, "fraction of each dataset's training images held out from every run (the same images for every "
        "train and lr of a seed): their accuracy chooses the learning rate of relative_gain_validated, "
        "reported beside the paper's relative_gain (lr chosen on the test accuracy); 0: none (default: "
        "%(default)s)", metavar="FRACTION", group="data", kind=HOLDOUT)
    protocol: str = option("in_situ", group="pairs", kind=choice(PROTOCOLS))
    pairs: int = option(512, "matched X-Y pairs (default: %(default)s)", group="pairs", kind=integer(1))
    pair_batch: int = option(16, "pairs per forward, the bootstrap's resampling unit (default: %(default)s)",
                             group="pairs", kind=integer(1))
    split: str = option("all", "split the pairs come from (default: %(default)s)", group="pairs",
                        kind=choice(("train", "val", "all")))
    measure_seed: int = option(0, "order of the pairs", group="pairs", kind=integer(0, MAX_SEED))
    components: list | None = option(
        None, "components trained alone, and the baselines full, lora (peft; also LoRA at equal budget) and "
        f"head, trained and reported beside them but not ranked (default: {','.join(TRAIN_ORDER)}, and lora "
        "at --granularity component when peft is installed; the paper's grid: MHA,FC1,FC2,LN1,LN2,full,lora)",
        group="train", kind=optional(csv(fields.checked(_component), unique=True)))
    granularity: str = option(
        "component", "component: each component in every layer at once (default); layer: each (component, "
        "layer) alone", group="train",
        kind=choice(GRANULARITIES))
    budgets: list | None = option(
        None, "selection at equal budget: each criterion's set (and the attention rule's) against random "
        "sets of the same budget, comma-separated budgets. --granularity component: numbers of components "
        "(default: 1, the runs already trained: no extra run); each k >= 2 trains every k-subset when there "
        "are at most 50 (C(5,2) = 10 sets: 10 more trains, each at every lr and seed), else --draws random "
        "ones and the criteria's, x lrs x seeds. --granularity layer: trainable parameters besides the head "
        "(default: twice the largest unit). Full finetuning is trained as the reference line",
        metavar="K,K", group="train", kind=optional(csv(integer(1), unique=True)))
    draws: int = option(20, "random sets per budget where there are more than 50 (default: %(default)s)",
                        group="train", kind=integer(1))
    baseline: str = option("head", "accuracy gain over the head-only run of the same seed (default) or the "
                           "initial accuracy", group="train", kind=choice(BASELINES))
    optimizer: list = option(
        DEFAULT_OPTIMIZERS, "optimisers, comma-separated: sgd (momentum 0.9), adamw, adam; each is trained "
        "and analysed alone (its own runs, lr grid, tables and verdict, in OUT/datasets/NAME-OPTIMIZER/), "
        "then pooled like several datasets (default: %(default)s)", group="optim",
        kind=csv(choice(tuple(OPTIMIZERS)), unique=True))
    lr: list | str | None = option(
        None, f"learning-rate grid of every optimiser; each train keeps its best (default: auto); auto, per "
        f"optimiser: {_grids(LR_GRID)} ({_grids(LAYER_LR_GRID)} with --granularity layer), widened x3 (at "
        "most 4 steps per side) for a train whose best lr is at an edge, until every best lr is interior",
        group="train", kind=optional(fields.Kind(_lr_text, _lr_check)))
    seed: list = option("0,1,2,3,4", "seeds (default: %(default)s: five, so that the paired tests and the "
                        "bootstrap can reject at 0.05)", group="train",
                        kind=csv(integer(0, MAX_SEED), unique=True))
    eval_limit: int = option(0, "validate on the first N images", group="train", kind=integer(0))
    checkpoint_every: int = option(50, group="train", kind=integer(0))
    jobs: int | None = option(None, "runs trained at once on this machine, in processes (--executor local; "
                              "default: 2 for the digits ViT on a CPU with 2+ cores, else 1)", group="grid",
                              kind=optional(integer(1)))
    threads: int | None = option(None, "intra-op threads of every run, whichever executor trains it "
                                 "(default: 1 for the digits ViT on CPU, else torch's; with --executor ray, "
                                 "--cpus-per-run); runs of the same --threads give the same results bit for "
                                 "bit", group="grid",
                                 kind=optional(fields.thread_count()))
    criteria: list = option(
        ",".join(CRITERIA), "criteria compared with the accuracy gains, comma-separated (default: every one: "
        "%(default)s); each is scored on the model the runs start from (see the criteria guide)",
        group="pairs", kind=csv(choice(tuple(CRITERIA)), unique=True))
    criterion_batches: int = option(4, "rgn, fisher, cka: labelled training batches of --batch-size images "
                                    "they read (default: %(default)s)", group="pairs", kind=integer(1))
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
                                       kind=optional(fields.number(positive=True)))
    run_plots: bool = option(False, "also draw each run's curves", group="out", action="store_true")
    calibrate_steps: int = option(10, kind=integer(1), cli=False)
    lr_auto: bool = option(False, cli=False)  # set by validate: --lr auto was given (lr is then the grid)

    @property
    def ranked(self) -> list[str]:
        """The components whose plasticity is ranked against their gain (``--components`` but the
        baselines)."""
        return [c for c in self.components if c not in BASELINE_TRAINS]

    @property
    def extra_baselines(self) -> list[str]:
        """The baselines of ``--components`` trained beside the gain's reference (head with
        ``--baseline head`` is that reference)."""
        return [c for c in self.components if c in BASELINE_TRAINS and not (c == "head" and
                                                                            self.baseline == "head")]

    @property
    def trains(self) -> list[str]:
        """The ``--train`` values of a component claim's runs: the components, the other baselines, then
        the head-only run when it is the gain's reference."""
        return self.ranked + self.extra_baselines + (["head"] if self.baseline == "head" else [])

    def validate(self) -> None:
        """What involves several options, the machine or the file system."""
        if self.out is None:
            raise OptionError("--out DIR is required: it holds the finetuning runs and the reports")
        settle(self, out=str(self.out))
        settle(self, data=_merge_datasets(self.data, self.datasets), datasets=None)
        if self.components is None:  # LoRA beside the components, at equal budget, where peft is there
            lora = ["lora"] if self.granularity == "component" and importlib.util.find_spec("peft") else []
            settle(self, components=[*TRAIN_ORDER, *lora])
        if self.steps is None:  # a layer claim trains 4-5x more runs: fewer steps keep it in budget
            settle(self, steps=LAYER_STEPS if self.granularity == "layer" else COMPONENT_STEPS)
        if self.lr is None or self.lr == "auto":  # default auto: a best lr at the grid's edge widens it
            settle(self, lr_auto=True, lr="auto")
        if len(self.ranked) < 3 and self.granularity != "layer":  # layer: units = components x layers
            raise OptionError(f"--components: a rank correlation needs at least 3 components besides the "
                              f"baselines, got {self.ranked}")
        if self.granularity == "layer" and len(self.ranked) < len(self.components):
            raise OptionError("--components: the baselines full, lora and head apply to --granularity "
                              "component (a layer claim compares every unit with the head-only run)")
        if "lora" in self.components:
            fields.fail_on("--components lora", import_peft)
        self.validate_executor()
        if self.pairs < self.pair_batch:
            raise OptionError(f"--pairs ({self.pairs}) must be at least --pair-batch ({self.pair_batch})")
        if self.granularity == "layer" and self.baseline != "head":
            raise OptionError("--granularity layer compares every unit with the head-only run: --baseline "
                              "head")
        if self.granularity == "component" and self.budgets and max(self.budgets) > len(self.ranked):
            raise OptionError(f"--budgets: a budget counts components at --granularity component; at most "
                              f"{len(self.ranked)} ({', '.join(self.ranked)}), got {max(self.budgets)}")
        if world()[0] > 1 and (self.jobs or 1) > 1:
            raise OptionError("--jobs must be 1 under torchrun (each run is already data-parallel)")
        family_of(self.model).check_options(self.model_kwargs, self.img_size)
        check_claim_out(self.out, several=self.several_arms)
        for spec in self.data:  # what finetune refuses (--amp fp16, odd batches)
            self.run_settings(spec, self.optimizer[0], progress=False).validate()

    @property
    def several_arms(self) -> bool:
        """More than one (dataset, optimiser) arm: each writes into OUT/datasets/NAME/."""
        return len(self.data) * len(self.optimizer) > 1

    def lrs_for(self, optimizer: str) -> list[float]:
        """The starting lr grid of ``optimizer``'s runs: ``--lr``, or with ``--lr auto`` that optimiser's
        default for the granularity (`LR_GRID`, `LAYER_LR_GRID`)."""
        if not self.lr_auto:
            return list(self.lr)
        return _LRS.parse((LAYER_LR_GRID if self.granularity == "layer" else LR_GRID)[optimizer])

    def run_settings(self, data: str, optimizer: str, *, progress: bool | None) -> RunSettings:
        """The settings of every finetuning run of the claim on the dataset ``data`` with ``optimizer``:
        the shared groups as given, no plasticity monitor, plots only with ``--run-plots``."""
        shared = {f.name: getattr(self, f.name) for g in SHARED_GROUPS for f in dataclasses.fields(g)}
        return RunSettings(**{**shared, "data": data, "optimizer": optimizer, "progress": progress},
                           eval_limit=self.eval_limit, checkpoint_every=self.checkpoint_every,
                           monitor_every=0, plots=self.run_plots)

    def record(self, **resolved) -> dict:
        """The options as claim.json records them (``resolved``: values decided at run time, e.g. jobs,
        or the one dataset of a per-dataset report)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["shard"] = None if self.shard is None else str(self.shard)
        return {**values, **resolved}


def _merge_datasets(data: list | None, datasets: list | None) -> list[str]:
    """``--data`` values then ``--datasets`` ones (default: the digits 5-9); each once."""
    merged = list(data or []) + list(datasets or [])
    if not merged:
        return [DEFAULT_DATA]
    repeated = sorted({d for d in merged if merged.count(d) > 1})
    if repeated:
        raise OptionError(f"--data/--datasets: {', '.join(repeated)} given twice")
    return merged


# what a claim writes into OUT (and nothing else: another directory is refused, never written into); a
# claim of several arms (datasets, optimisers) writes each one's files into OUT/datasets/NAME/ and the
# aggregate into OUT
CLAIM_FILES = frozenset({"runs", "plasticity_chunks.json", "claim.json", "claim.txt", "claim.png",
                         "budgets.png", "criteria", "criteria.json"})
AGGREGATE_FILES = frozenset({"datasets", "aggregate.json", "aggregate.txt", "aggregate.png"})


def check_claim_out(out: str, *, several: bool = False) -> None:
    """``--out``: a new or empty directory, or one a claim wrote (its files only; ``several``: a claim
    of several arms); ValueError otherwise."""
    check_out_dir(out)
    owned = AGGREGATE_FILES if several else CLAIM_FILES
    foreign = [n for n in foreign_files(out, owned) if not n.startswith(".")]  # hidden: temporaries
    if several and foreign and set(foreign) <= CLAIM_FILES:
        raise ValueError(f"--out {out!r} holds a claim of one arm (one dataset, one optimiser: "
                         f"{', '.join(sorted(foreign)[:5])}), and these options make several: rerun it with "
                         "the options it was made with (e.g. --optimizer sgd: the default was sgd before "
                         "sgd,adamw), or give a new or empty directory")
    if foreign:
        kind = "a claim of several arms (datasets or optimisers)" if several else "a claim of one arm"
        raise ValueError(f"--out {out!r} holds files {kind} did not write ({', '.join(foreign[:5])}"
                         f"{' ...' if len(foreign) > 5 else ''}): give a new or empty directory, or one an "
                         "earlier claim with these datasets and optimisers wrote")
    datasets = Path(out) / "datasets"
    if several and datasets.is_dir():
        for d in datasets.iterdir():
            if d.is_dir():
                check_claim_out(str(d))
