"""The model of a finetuning run: a fresh one with its head, its device, what to train, and the recipe that
trains it, from timm: the optimiser (``create_optimizer_v2``: momentum SGD, AdamW or Adam; no weight decay on
norms, biases, position embeddings and class tokens; layer-wise lr decay) and the schedule
(``create_scheduler_v2``: cosine or constant, after a linear warm-up, stepped once per optimiser step)."""

from __future__ import annotations

import torch

from ..models.builder import BuiltModel, build_model
from ..models.families import family_of
from ..options.groups import OPTIMIZERS, ModelOptions, OptimOptions, RuntimeOptions
from ..runtime.device import resolve_device
from ..runtime.distributed import DistContext
from .lora import apply_lora
from .selection import select_trainable


def built_model(opts: ModelOptions, num_classes: int) -> BuiltModel:
    """The model ``opts`` names (`vitplast.models.builder.build_model`) with a ``num_classes`` head: a family
    whose checkpoints keep their pretraining head (the digits ViT) gets a fresh one (drawn from the torch
    RNG); timm and transformers models get a fresh head when their own has another number of classes."""
    built = build_model(opts.model_request(), num_classes)
    if family_of(built.name).keeps_pretraining_head:
        built.net.reset_classifier(num_classes)
    return built


def fresh_model(opts: ModelOptions, num_classes: int) -> torch.nn.Module:
    """The network of `built_model`."""
    return built_model(opts, num_classes).net


def run_device(opts: RuntimeOptions, dctx: DistContext) -> torch.device:
    """``--device`` (auto: cuda when available); under torchrun each rank takes its local GPU."""
    return resolve_device(opts.device, dctx.local_rank if dctx.enabled else None)


def make_trainable(model, parts: tuple[str, ...], lora_r: int, components=None,
                   lora_targets: str | None = None, cmap=None):
    """``(model, trainable parameter names)``: LoRA adapters for ``lora`` (on ``lora_targets``, a
    ``--train``-style spec such as ``"MHA@2-3+FC1"``; default MHA), else what
    ``vitplast.finetune.trainable.select_trainable`` leaves trainable (the rest is frozen); ``components``:
    the component map (``--component``; default: the model's preset); ``cmap``: that map resolved already
    (`Prepared.component_map`)."""
    if parts == ("lora",):
        model = apply_lora(model, r=lora_r, components=components, targets=lora_targets)
        return model, [n for n, p in model.named_parameters() if p.requires_grad]
    return model, select_trainable(model, parts, components, cmap)


def make_optimizer(opts: OptimOptions, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """timm's ``create_optimizer_v2`` over the trainable parameters of ``model`` (a peft model: its base
    model's names, which timm's rules read): ``--optimizer`` (sgd: momentum 0.9, not Nesterov),
    ``--weight-decay`` on every trainable tensor but norms, biases and the model's ``no_weight_decay()`` names
    (position embeddings, class tokens), ``--layer-decay`` (lr scale per block, applied by the scheduler).
    ValueError when the model has no block grouping for ``--layer-decay``."""
    from timm.optim import create_optimizer_v2

    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    if opts.layer_decay is not None and not callable(getattr(target, "group_matcher", None)):
        raise ValueError(f"--layer-decay: {type(target).__name__} has no block grouping (timm's "
                         "group_matcher); layer-wise decay needs a timm model")
    return create_optimizer_v2(target, opt=OPTIMIZERS[opts.optimizer], lr=lr, weight_decay=opts.weight_decay,
                               momentum=0.9, layer_decay=opts.layer_decay)


def make_scheduler(opts: OptimOptions, optimizer: torch.optim.Optimizer):
    """timm's ``create_scheduler_v2`` for ``--steps`` optimiser steps: ``--warmup`` linear steps from lr /
    warmup up to lr, then cosine (to 0) or constant over the rest. It is a function of the step count:
    ``step_update(n)`` sets the lr of step ``n`` (times each group's ``lr_scale``)."""
    from timm.scheduler import create_scheduler_v2

    lr = current_lr(optimizer)
    rest = max(1, opts.steps - opts.warmup)
    # constant: timm's step schedule whose one decay, by a factor 1, falls after the last step
    kind = dict(sched="cosine") if opts.schedule == "cosine" else dict(sched="step", decay_epochs=rest + 1,
                                                                        decay_rate=1.0)
    sched, _ = create_scheduler_v2(optimizer, num_epochs=rest, warmup_epochs=opts.warmup, warmup_prefix=True,
                                   warmup_lr=lr / max(1, opts.warmup), min_lr=0.0, step_on_epochs=False,
                                   updates_per_epoch=1, **kind)
    sched.step_update(0)
    return sched


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The lr of the step about to be taken (the largest of the groups': the unscaled one)."""
    return max(g["lr"] for g in optimizer.param_groups)
