"""The run spec: one finetuning run, fully described by typed values (what ``vitplast finetune``'s grid
makes for each (train, lr, seed), what claim hands to :func:`vitplast.finetune.train_run`, and what an
executor ships to a worker: it pickles, and it is what the run directory's config.json records)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .options import RunSettings


def run_name(train: str, lr: float, seed: int) -> str:
    """The directory name of one run of a grid (``MHA_FC1-lr0.001-s0``); claim names its runs alike."""
    return f"{train.replace('+', '_')}-lr{lr:g}-s{seed}"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    train: str            # one --train value (MHA, MHA@3+FC1, head, lora, auto, ...)
    lr: float
    seed: int
    directory: Path       # the run directory (config.json, metrics.jsonl, checkpoint.pt, summary.json)
    settings: RunSettings
    resume: bool = True   # continue a partial run, load a finished one (False: refuse both)

    @property
    def label(self) -> str:
        return f"{self.train} lr={self.lr:g} seed={self.seed}"

    def config(self) -> dict:
        """What config.json holds: every setting, the run's own values, where it was written."""
        values = {f.name: getattr(self.settings, f.name) for f in dataclasses.fields(self.settings)}
        return {**values, "out": str(self.directory), "resume": self.resume, "train": self.train,
                "lr": self.lr, "seed": self.seed}
