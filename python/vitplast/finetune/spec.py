"""The run spec: one finetuning run, fully described by typed values (what ``vitplast finetune``'s grid makes
for each (train, lr, seed), what claim hands to `vitplast.finetune.loop.train_run`, and what an executor ships
to a worker: it pickles, and it is what the run directory's config.json records).

A resumed run's options are compared with its config.json (`RunSpec.resume_config`). Options added after that
file was written are absent from it: each is compared with the value that does what a run without the option
did (`ADDED_OPTIONS`), and a resume with another value is refused, naming the flags that resume it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..runs.lock import RunDirError
from .options import RunSettings
from .selection import TrainPlan

ANY = object()  # an added option whose every value agrees with a run written without it
# option -> (the value of a run written before it existed, the flag that gives that value)
ADDED_OPTIONS = {
    "pretrained": (False, "without --pretrained"),
    "random_init": (ANY, ""),  # the weights rule makes it what the run did: random without weights
    "model_transform": (False, "--no-model-transform"),
    "mean": (None, "without --mean"),
    "std": (None, "without --std"),
    "augment": (False, "--no-augment"),
    "layer_decay": (None, "without --layer-decay"),
    "grad_accum": (1, "--grad-accum 1"),
    "trust_remote_code": (False, "without --trust-remote-code"),
    "holdout": (0.0, "--holdout 0"),
}

_NOT_IN_NAMES = re.compile(r"[^\w@.-]")  # characters of a --train value a directory name replaces


def run_name(train: str, lr: float, seed: int) -> str:
    """The directory name of one run of a grid (``MHA_FC1-lr0.001-s0``, ``lora_r_8-lr0.01-s1``); claim
    names its runs alike."""
    return f"{_NOT_IN_NAMES.sub('_', train)}-lr{lr:g}-s{seed}"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    train: TrainPlan      # one --train value (MHA, MHA@3+FC1, head, lora, auto, ...); a str is parsed
    lr: float
    seed: int
    directory: Path       # the run directory (config.json, metrics.jsonl, checkpoint.pt, summary.json)
    settings: RunSettings
    resume: bool = True   # continue a partial run, load a finished one (False: refuse both)

    def __post_init__(self) -> None:
        """A plain ``train`` string (a Python caller's, a claim's run) becomes its `TrainPlan`."""
        object.__setattr__(self, "train", TrainPlan.parse(self.train, self.settings.components))

    @property
    def label(self) -> str:
        return f"{self.train} lr={self.lr:g} seed={self.seed}"

    def config(self) -> dict:
        """What config.json holds: every setting, the run's own values, where it was written."""
        values = {f.name: getattr(self.settings, f.name) for f in dataclasses.fields(self.settings)}
        return {**values, "out": str(self.directory), "resume": self.resume, "train": self.train,
                "lr": self.lr, "seed": self.seed}

    def resume_config(self, saved: dict | None) -> dict:
        """`config` as it is compared with ``saved`` (the run directory's config.json; None: a new run): the
        added options ``saved`` lacks are left out when they hold the value of a run written without them;
        RunDirError naming the flags to pass otherwise."""
        config = self.config()
        if saved is None:
            return config
        absent = [k for k in ADDED_OPTIONS if k in config and k not in saved]
        differ = [k for k in absent if ADDED_OPTIONS[k][0] is not ANY and config[k] != ADDED_OPTIONS[k][0]]
        if differ:
            hows = ", ".join(ADDED_OPTIONS[k][1] for k in differ)
            raise RunDirError(f"--resume: {self.directory} was written before the options "
                              f"{', '.join(differ)} existed; resuming it needs {hows}, which do what it "
                              "did (or choose another --out)")
        return {k: v for k, v in config.items() if k not in absent}
