"""The model of a finetuning run: a fresh one with its head, its device, what to train, the optimiser
and its schedule."""

from __future__ import annotations

import math

import torch

from ..models.builder import DIGITS_MODEL
from ..models.builder import build_model as build
from ..options.groups import ModelOptions, OptimOptions, RuntimeOptions
from ..runtime.device import resolve_device
from ..runtime.distributed import DistContext


def fresh_model(opts: ModelOptions, num_classes: int) -> torch.nn.Module:
    """The model ``opts`` names (:func:`vitplast.models.builder.build_model`, random init without a
    warning) with a fresh ``num_classes`` head (drawn from the torch RNG)."""
    built = build(opts.model, num_classes, weights=opts.weights, model_kwargs=opts.model_kwargs,
                  img_size=opts.img_size, warn_random_init=False)
    if opts.model == DIGITS_MODEL:  # it keeps its pretraining head: replace it
        built.net.reset_classifier(num_classes)
    return built.net


def lr_schedule(opts: OptimOptions):
    """The learning-rate factor of iteration ``it``: linear warm-up, then constant or cosine."""
    steps, warmup, schedule = opts.steps, opts.warmup, opts.schedule

    def factor(it: int) -> float:
        if it < warmup:
            return (it + 1) / warmup
        if schedule == "constant":
            return 1.0
        t = (it - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return factor


def run_device(opts: RuntimeOptions, dctx: DistContext) -> torch.device:
    """``--device`` (auto: cuda when available); under torchrun each rank takes its local GPU."""
    return resolve_device(opts.device, dctx.local_rank if dctx.enabled else None)


def make_trainable(model, parts: tuple[str, ...], lora_r: int, components=None,
                   lora_targets: str | None = None):
    """``(model, trainable parameter names)``: LoRA adapters for ``lora`` (on ``lora_targets``, a
    ``--train``-style spec such as ``"MHA@2-3+FC1"``; default MHA), else what
    ``vitplast.finetune.trainable.select_trainable`` leaves trainable (the rest is frozen);
    ``components``: the component map (``--component``; default: the model's preset)."""
    from .lora import apply_lora
    from .selection import select_trainable

    if parts == ("lora",):
        model = apply_lora(model, r=lora_r, components=components, targets=lora_targets)
        return model, [n for n, p in model.named_parameters() if p.requires_grad]
    return model, select_trainable(model, parts, components)


def make_optimizer(opts: OptimOptions, params: list, lr: float) -> torch.optim.Optimizer:
    """``--optimizer``: SGD with momentum 0.9, or Adam; ``--weight-decay`` on both."""
    if opts.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=opts.weight_decay)
    return torch.optim.Adam(params, lr=lr, weight_decay=opts.weight_decay)
