"""The arms of a claim: each downstream dataset (``--data``, repeatable, or ``--datasets``) trained with
each optimiser (``--optimizer sgd,adamw``), and where each arm's runs and reports go: with one arm,
``OUT`` itself (``OUT/runs/``, ``OUT/claim.json``, ...); with several, ``OUT/datasets/NAME/`` each (the
same files; NAME is the dataset's, with ``-OPTIMIZER`` when there are several optimisers), and the
aggregate over them in ``OUT``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..finetune.options import RunSettings
from .options import ClaimOptions


@dataclasses.dataclass(frozen=True)
class DatasetPlan:
    """One arm of the claim: a dataset and the optimiser its runs train with."""

    spec: str  # the --data value
    name: str  # a directory name made of it (and of the optimiser, when there are several)
    out: Path  # where its runs, measurement and reports go
    settings: RunSettings  # of every finetuning run on it
    several: bool  # one of several arms (its messages name it)
    lrs: tuple[float, ...]  # the starting lr grid of its runs (--lr, or the optimiser's --lr auto grid)

    @property
    def optimizer(self) -> str:
        return self.settings.optimizer

    @property
    def tag(self) -> str:
        """`` [NAME]`` in the messages of a claim over several datasets, else nothing."""
        return f" [{self.name}]" if self.several else ""


def dataset_name(spec: str) -> str:
    """A directory name for the dataset ``spec``: ``digits:5-9`` -> ``digits_5-9``, an ImageFolder path
    -> its last part, ``cifar10:/data/c10`` -> ``cifar10_c10``."""
    kind, sep, rest = spec.partition(":")
    if not sep or "/" in kind:  # a path
        kind, rest = "", spec
    tail = Path(rest.rstrip("/")).name if "/" in rest else rest
    text = f"{kind}_{tail}" if kind and tail else kind or tail
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "dataset"


def dataset_plans(opts: ClaimOptions, *, progress: bool | None) -> list[DatasetPlan]:
    """One plan per dataset and optimiser of ``opts`` (each dataset's optimisers in the order given);
    names made distinct by a suffix."""
    several = opts.several_arms
    plans, seen = [], set()
    for spec in opts.data:
        name, k = dataset_name(spec), 2
        while name in seen:
            name, k = f"{dataset_name(spec)}-{k}", k + 1
        seen.add(name)
        for optimizer in opts.optimizer:
            arm = f"{name}-{optimizer}" if len(opts.optimizer) > 1 else name
            out = Path(opts.out) / "datasets" / arm if several else Path(opts.out)
            plans.append(DatasetPlan(spec, arm, out, opts.run_settings(spec, optimizer, progress=progress),
                                     several, tuple(opts.lrs_for(optimizer))))
    return plans
