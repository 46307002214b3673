"""The option groups the commands compose: each declared once, here, in the spirit of transformers'
``TrainingArguments``: a command's options class inherits the groups it takes, so ``--model`` means the
same, reads the same in ``--help`` and is checked the same everywhere, and a function that needs one
group is typed with it (``build_model(opts: ModelOptions, ...)``) and accepts any command's options.

- :class:`ModelOptions`: which model and weights (``--model``, ``--model-arg``, ``--weights``,
  ``--img-size``);
- :class:`DataOptions`: the downstream data (``--data``, ``--workers``);
- :class:`OptimOptions`: how one finetuning run optimises (optimiser, schedule, steps, batch);
- :class:`RuntimeOptions`: where and how it computes (``--device``, ``--amp``, progress bars).
"""

from __future__ import annotations

import dataclasses

from ..models.builder import DIGITS_MODEL
from ..runtime.device import check_device
from ..runtime.precision import AMP_ALIASES, AMP_CHOICES
from . import parsing as T
from .fields import Kind, checked, choice, integer, number, option, optional

OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "cosine")
GROUP_TITLES = {"model": "model", "data": "data", "optim": "optimisation", "runtime": "runtime"}


def _model_kwargs(value) -> dict:
    """``--model-arg`` values (``KEY=VALUE`` texts) or a dict, as the model's constructor keywords."""
    if isinstance(value, dict):
        return value
    if isinstance(value, (list, tuple)):
        return dict(T.model_arg(v) if isinstance(v, str) else tuple(v) for v in value)
    raise ValueError(f"must be a dict, got {type(value).__name__}")


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    model: str = option(DIGITS_MODEL, f"timm model name, or {DIGITS_MODEL!r} (the embedded ViT pretrained "
                        "here on digits 0-4)", group="model")
    model_kwargs: dict = option(help="extra timm.create_model argument (repeatable), e.g. patch_size=4",
                                flag="--model-arg", action="append", metavar="KEY=VALUE", group="model",
                                kind=Kind(str, _model_kwargs), default_factory=dict)
    weights: str | None = option(None, "local pretrained checkpoint (.safetensors, .pth, .npz)",
                                 group="model")
    img_size: int | None = option(None, "input size (default: the model's)", group="model",
                                  kind=optional(integer(1)))


@dataclasses.dataclass(frozen=True)
class DataOptions:
    data: str = option("digits:5-9", "digits[:CLASSES], synthetic, cifar10:DIR, cifar100:DIR or an "
                       "ImageFolder DIR", metavar="SPEC", group="data")
    workers: int = option(0, "data-loading processes", group="data", kind=integer(0))


@dataclasses.dataclass(frozen=True)
class OptimOptions:
    optimizer: str = option("adam", "sgd has momentum 0.9", group="optim", kind=choice(OPTIMIZERS))
    weight_decay: float = option(0.0, group="optim", kind=number(minimum=0.0))
    schedule: str = option("cosine", group="optim", kind=choice(SCHEDULES))
    warmup: int = option(0, "linear warm-up iterations", group="optim", kind=integer(0))
    grad_clip: float | None = option(None, "clip the global gradient norm to this value", group="optim",
                                     kind=optional(number(positive=True)))
    steps: int = option(150, "optimiser steps (default: %(default)s)", group="optim",
                        kind=integer(1, T.MAX_STEPS))
    batch_size: int = option(64, "images per optimiser step, over all processes (default: %(default)s)",
                             group="optim", kind=integer(1))


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    device: str = option("auto", "auto (cuda when available), cpu, cuda, cuda:N (default: %(default)s)",
                         group="runtime", kind=checked(check_device))
    amp: str = option("none", "autocast precision of the forward passes (default: %(default)s)",
                      group="runtime", kind=choice(AMP_CHOICES, AMP_ALIASES))
    progress: bool | None = option(None, "force the progress bars (default: when stderr is a terminal)",
                                   group="runtime", action="store_true", negation="--no-progress")
