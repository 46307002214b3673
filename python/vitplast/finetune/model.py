"""The model of a finetuning run: building it, its device and precision, what to train, the optimiser."""

from __future__ import annotations

import contextlib
import math

import torch

from ..runtime.device import resolve_device
from ..runtime.distributed import DistContext
from ..models.builder import DIGITS_MODEL
from ..models.builder import build_model as build
from ..models.builder import input_size as model_input_size
from .trainable import parse_train


def build_model(cfg: dict, num_classes: int) -> torch.nn.Module:
    """The model named by ``cfg["model"]`` (:func:`vitplast.models.builder.build_model`, random
    init without a warning) with a fresh ``num_classes`` head (drawn from the torch RNG)."""
    built = build(cfg["model"], num_classes, weights=cfg["weights"], model_kwargs=cfg["model_kwargs"],
                  img_size=cfg["img_size"], warn_random_init=False)
    if cfg["model"] == DIGITS_MODEL:  # it keeps its pretraining head: replace it
        built.net.reset_classifier(num_classes)
    return built.net


def input_size(model, cfg) -> int:
    """The model's input size (``--img-size`` for a model without one of its own)."""
    return model_input_size(model, cfg["img_size"])


def lr_schedule(cfg: dict):
    """The learning-rate factor of iteration ``it``: linear warm-up, then constant or cosine."""
    steps, warmup = cfg["steps"], cfg["warmup"]

    def factor(it: int) -> float:
        if it < warmup:
            return (it + 1) / warmup
        if cfg["schedule"] == "constant":
            return 1.0
        t = (it - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return factor


def run_device(cfg: dict, dctx: DistContext) -> torch.device:
    """``--device`` (auto: cuda when available); under torchrun each rank takes its local GPU."""
    return resolve_device(cfg["device"], dctx.local_rank if dctx.enabled else None)


def amp_factory(cfg: dict, device: torch.device):
    """A context-manager factory: bf16 autocast with ``--amp bf16``, else a no-op."""
    if cfg["amp"] == "bf16":
        return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def trainable_parts(cfg: dict, train: str, model, feed, device, dctx: DistContext, amp, ckpt, log,
                    say=print) -> tuple[tuple[str, ...], dict | None]:
    """The parts ``train`` names, and for ``auto`` its record: the most plastic components within
    ``--budget``, measured on the first ``--auto-batches`` training batches (or read back from the
    checkpoint of a resumed run, so a resumed run trains what it trained)."""
    comps = cfg.get("components")
    parts = parse_train(train, comps)
    if parts not in (("auto",), ("auto@layer",)):
        return parts, None
    from .step_recorder import component_means, measure_plasticity
    from .trainable import choose_components, choose_units

    if ckpt is not None and "auto" in ckpt:
        auto = ckpt["auto"]
    else:
        batches = [feed.get(i)[0].to(device) for i in range(cfg["auto_batches"])]
        measured = measure_plasticity(model, batches, dist=dctx, amp=amp, components=comps)
        if parts == ("auto@layer",):  # (component, layer) units, each with its layer's plasticity
            per_layer = {c: measured["plasticity"][c] for c in component_means(measured)}
            auto = {"plasticity": per_layer,
                    "chosen": choose_units(per_layer, model, cfg["budget"], components=comps)}
        else:
            means = component_means(measured)
            auto = {"plasticity": means,
                    "chosen": choose_components(means, model, cfg["budget"], components=comps)}
        log.log({"kind": "auto", "iter": -1, "step": 0, **auto, "budget": cfg["budget"]})
    chosen = auto["chosen"]
    say(f"--train {parts[0]} (budget {cfg['budget']}): plasticity "
        + ", ".join(f"{c} {v:.3f}" if isinstance(v, float) else f"{c} " + "/".join(f"{x:.2f}" for x in v)
                    for c, v in auto["plasticity"].items())
        + f" -> training {'+'.join(chosen) or 'head only'}")
    return tuple(chosen) or ("head",), auto


def make_trainable(model, parts: tuple[str, ...], lora_r: int, components=None,
                   lora_targets: str | None = None):
    """``(model, trainable parameter names)``: LoRA adapters for ``lora`` (on ``lora_targets``, a
    ``--train``-style spec such as ``"MHA@2-3+FC1"``; default MHA), else what
    ``vitplast.finetune.trainable.select_trainable`` leaves trainable (the rest is frozen);
    ``components``: the component map (``--component``; default: the model's preset)."""
    from .trainable import apply_lora, select_trainable

    if parts == ("lora",):
        model = apply_lora(model, r=lora_r, components=components, targets=lora_targets)
        return model, [n for n, p in model.named_parameters() if p.requires_grad]
    return model, select_trainable(model, parts, components)


def make_optimizer(cfg: dict, params: list, lr: float) -> torch.optim.Optimizer:
    """``--optimizer``: SGD with momentum 0.9, or Adam; ``--weight-decay`` on both."""
    if cfg["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=cfg["weight_decay"])
    return torch.optim.Adam(params, lr=lr, weight_decay=cfg["weight_decay"])
