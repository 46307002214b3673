"""The option groups the commands compose: each declared once, here, in the spirit of transformers'
``TrainingArguments``: a command's options class inherits the groups it takes, so ``--model`` means the
same, reads the same in ``--help`` and is checked the same everywhere, and a function that needs one
group is typed with it (``built_model(opts: ModelOptions, ...)``) and accepts any command's options.
The options import the models and the data, never the reverse: a group hands them its own small request
(`ModelOptions.model_request`, `DataOptions.transform_request`).

- `ModelOptions`: which model and weights (``--model``, ``--model-arg``, ``--weights``,
  ``--pretrained``, ``--random-init``, ``--img-size``, ``--trust-remote-code``). It checks itself when it
  is made (whatever composes it): nothing runs random weights without ``--random-init``
  (`vitplast.models.sources`), no code of a model folder runs without ``--trust-remote-code``;
- `DataOptions`: the downstream data and how its images become the model's input (``--data``,
  ``--workers``, ``--mean``, ``--std``, ``--no-model-transform``, ``--no-augment``, ``--holdout``: the
  part of the training images held out to validate on);
- `OptimOptions`: how one finetuning run optimises (timm's optimisers and schedulers: optimiser,
  weight and layer decay, schedule, warm-up, clipping, accumulation, steps, batch);
- `RuntimeOptions`: where and how it computes (``--device``, ``--amp``, progress bars).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..data.transforms import TransformRequest
from ..models.sizes import MAX_IMG_SIZE, check_model_size
from ..models.sources import DEFAULT_MODEL, ModelRequest, check_weights_source
from ..runtime.device import check_device
from ..runtime.precision import AMP_ALIASES, AMP_CHOICES
from ..runtime.resources import check_workers
from . import parsing
from .fields import Kind, OptionError, checked, choice, csv, integer, number, option, optional, settle

# --optimizer -> timm's create_optimizer_v2 name: "sgd" is plain momentum SGD (timm's "momentum"; timm's
# own "sgd" is Nesterov's)
OPTIMIZERS = {"sgd": "momentum", "adamw": "adamw", "adam": "adam"}
SCHEDULES = ("constant", "cosine")
# --img-size of every command: pixels a side, bounded before any model is built
IMG_SIZE = optional(integer(1, MAX_IMG_SIZE,
                            what=f"must be a positive integer <= {MAX_IMG_SIZE} (pixels a side)"))
GROUP_TITLES = {"model": "model", "data": "data", "optim": "optimisation", "runtime": "runtime"}


def _model_kwargs(value) -> dict:
    """``--model-arg`` values (``KEY=VALUE`` texts) or a dict, as the model's constructor keywords."""
    if isinstance(value, dict):
        return value
    if isinstance(value, (list, tuple)):
        return dict(parsing.model_arg(v) if isinstance(v, str) else tuple(v) for v in value)
    raise ValueError(f"must be a dict, got {type(value).__name__}")


def _channels(positive: bool):
    """Per-channel values: one (for every channel) or three, as a tuple of 3 floats."""
    item = number(positive=positive)

    def check(value):
        values = csv(item).check(value)
        if len(values) not in (1, 3):
            raise ValueError(f"expected 1 or 3 comma-separated values (R,G,B), got {len(values)}")
        return tuple(values * 3 if len(values) == 1 else values)

    return Kind(csv(item).parse, check, "R,G,B")


def _grad_clip(value):
    """A positive norm, or None (0: no clipping)."""
    return None if value is None or value == 0 else number(positive=True).check(value)


def _workers(value):
    """A count of data-loading processes, at most the CPUs this process may use."""
    value = integer(0).check(value)
    check_workers(value, flag=None)  # the option's check names --workers
    return value


def _bounded(kind: Kind, within: Callable[[float], bool], reason: str) -> Kind:
    """``kind``, its checked values also ``within`` the bound ``reason`` says (else ValueError)."""

    def check(value):
        value = kind.check(value)
        if not within(value):
            raise ValueError(f"{reason}, got {value!r}")
        return value

    return checked(check, kind.parse)


# --holdout of every command that finetunes: a fraction in [0, 1) of the training data held out (0: none)
HOLDOUT = _bounded(number(minimum=0.0), lambda v: v < 1,
                   "must be in [0, 1) (the fraction of the training images held out)")


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    model: str = option(
        DEFAULT_MODEL, "timm name (with a pretrained tag, or hf-hub:ORG/NAME), hf:ID_OR_DIR (a transformers "
        f"image model), or {DEFAULT_MODEL!r} (the embedded ViT pretrained here on digits 0-4)", group="model")
    model_kwargs: dict = option(
        help="extra timm.create_model argument (repeatable), e.g. patch_size=4 or "
        "pretrained_cfg_overlay='{\"file\": \"w.safetensors\"}' (with --pretrained); for hf: models, "
        "from_pretrained keywords", flag="--model-arg", action="append", metavar="KEY=VALUE", group="model",
        kind=Kind(str, _model_kwargs), default_factory=dict)
    weights: str | None = option(
        None, "local checkpoint (.safetensors, .pth, .bin, .npz; a Lightning .ckpt, a timm training "
        "checkpoint), or a model folder (a hub snapshot, a save_pretrained directory)", metavar="PATH",
        group="model")
    pretrained: bool = option(
        False, "load the model's published weights: timm's through the Hugging Face hub and its local cache "
        "(HF_HUB_OFFLINE honoured); hf: and digits-vit models always come with theirs", action="store_true",
        group="model")
    random_init: bool = option(
        False, "run randomly initialised weights (without it, a model with no weights to load is refused)",
        action="store_true", group="model")
    img_size: int | None = option(None, "input size (default: the model's)", group="model", kind=IMG_SIZE)
    trust_remote_code: bool = option(
        False, "run the Python code a transformers model folder or hub repository ships (its config.json's "
        "auto_map); without it such a model is refused and no code of a model folder ever runs. Only for a "
        "model whose code you have read and trust", action="store_true", group="model")

    def __post_init__(self) -> None:
        """``--model-arg pretrained=true`` is ``--pretrained``; then the weights rule of
        `vitplast.models.sources.check_weights_source` (an `OptionError` naming the flag)."""
        kwargs = self.model_kwargs if isinstance(self.model_kwargs, dict) else {}
        if "pretrained" in kwargs:
            flag = kwargs["pretrained"]
            if not isinstance(flag, bool):
                raise OptionError(f"--model-arg pretrained={flag!r}: expected true or false (or pass "
                                  "--pretrained)")
            kwargs = {k: v for k, v in kwargs.items() if k != "pretrained"}
            settle(self, pretrained=self.pretrained or flag, model_kwargs=kwargs)
        try:
            check_weights_source(self.model, self.weights, bool(self.pretrained), bool(self.random_init),
                                 kwargs)
            check_model_size(kwargs, "--model-arg")
        except ValueError as exc:  # an OptionError too: the same one line
            raise OptionError(str(exc)) from None

    def model_request(self) -> ModelRequest:
        """The model these options name, as `vitplast.models.builder.build_model` takes it."""
        return ModelRequest(self.model, dict(self.model_kwargs), self.weights, bool(self.pretrained),
                            bool(self.random_init), self.img_size, bool(self.trust_remote_code))


@dataclasses.dataclass(frozen=True)
class DataOptions:
    data: str = option("digits:5-9", "digits[:CLASSES], synthetic, cifar10:DIR, cifar100:DIR or an "
                       "ImageFolder DIR", metavar="SPEC", group="data")
    workers: int = option(0, "data-loading processes (at most the CPUs this process may use)", group="data",
                          kind=checked(_workers, integer(0).parse))
    model_transform: bool = option(
        True, "prepare images with a fixed transform (resize to --img-size, bilinear; ImageNet mean and std) "
        "instead of the model's own (its mean, std, interpolation and crop)", flag="--no-model-transform",
        action="store_false", group="data")
    mean: tuple | None = option(None, "per-channel mean of the normalisation (default: the model's)",
                                group="data", kind=optional(_channels(False)))
    std: tuple | None = option(None, "per-channel standard deviation of the normalisation (default: the "
                               "model's)", group="data", kind=optional(_channels(True)))
    augment: bool = option(
        True, "no train-time augmentation of image files when finetuning (by default timm's: random resized "
        "crop, flip, colour jitter)", flag="--no-augment", action="store_false", group="data")
    holdout: float = option(
        0.0, "fraction of the training images held out, never trained on, and evaluated at the end of "
        "each run (holdout_acc: a validation accuracy that chooses a learning rate without the test set); "
        "the same positions of the training set in every run, whatever its seed, lr or --train (0: none; "
        "default: %(default)s)", metavar="FRACTION", group="data", kind=HOLDOUT)

    def transform_request(self) -> TransformRequest:
        """How these options prepare the model's images, as `vitplast.data.transforms.with_overrides`
        takes it."""
        return TransformRequest(bool(self.model_transform), self.mean, self.std)


@dataclasses.dataclass(frozen=True)
class OptimOptions:
    optimizer: str = option(
        "sgd", "sgd: momentum 0.9 (the paper's protocol); adamw; adam. Built by timm (create_optimizer_v2): "
        "no weight decay on norms, biases, position embeddings and class tokens", group="optim",
        kind=choice(tuple(OPTIMIZERS)))
    weight_decay: float = option(0.0, group="optim", kind=number(minimum=0.0))
    layer_decay: float | None = option(
        None, "layer-wise lr decay (timm's): each block nearer the input gets lr times this factor once more",
        group="optim", kind=optional(_bounded(number(positive=True), lambda v: v <= 1,
                                              "must be in (0, 1] (the factor per block towards the input)")))
    schedule: str = option("cosine", group="optim", kind=choice(SCHEDULES))
    warmup: int = option(0, "linear warm-up steps (timm's scheduler)", group="optim", kind=integer(0))
    grad_clip: float | None = option(1.0, "clip the global gradient norm to this value (0: no clipping)",
                                     group="optim", kind=checked(_grad_clip, number().parse))
    grad_accum: int = option(
        1, "micro-batches per optimiser step: each step's --batch-size images go through N forward and "
        "backward passes (the same step in less memory)", group="optim", kind=integer(1))
    steps: int = option(150, "optimiser steps (default: %(default)s)", group="optim",
                        kind=integer(1, parsing.MAX_STEPS))
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
