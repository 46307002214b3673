"""The one model builder of the commands: the embedded digits ViT or any timm model, with its weights
and ``--model-arg`` constructor arguments, and the input size it takes.

``build_model(name, num_classes, weights=..., model_kwargs=..., img_size=...)``:

- ``name == DIGITS_MODEL`` (``"digits-vit"``): the embedded ViT (:mod:`vitplast.models.digits`); without
  ``weights`` the one pretrained here on digits 0-4 (cached; pretrained first when absent), with
  ``weights`` that architecture loaded from them. Its head keeps the pretraining classes (a finetune
  run replaces it); its architecture is fixed, so ``model_kwargs`` and another ``img_size`` are errors;
- any other name: the timm model of that name (:func:`vitplast.models.timm_models.create_vit`, local
  weights only, loaded by :func:`vitplast.models.weights.load_weights`).

A ``vitplast finetune`` run directory (or its ``checkpoint.pt`` / ``model.safetensors``) given as
weights also gives the architecture (:func:`resolve_architecture`): its ``config.json`` holds the
model, its constructor arguments and its image size.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path

DIGITS_MODEL = "digits-vit"  # the embedded default of every command's --model


@dataclasses.dataclass
class BuiltModel:
    net: object  # torch.nn.Module, in eval mode, float32, on the CPU
    img_size: int
    description: str
    name: str
    timm_kwargs: dict


def finetune_run_config(weights: str | os.PathLike | None) -> dict | None:
    """The ``config.json`` of the finetune run that wrote ``weights`` (a run directory, or a file in
    one), or None."""
    if weights is None:
        return None
    p = Path(weights).expanduser()
    folder = p if p.is_dir() else p.parent if p.name in ("checkpoint.pt", "model.safetensors") else None
    if folder is None or not (folder / "config.json").is_file():
        return None
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) and "model" in cfg else None


def resolve_architecture(model: str | None, weights, img_size: int | None) -> tuple[str, dict, int | None]:
    """``(model name, timm constructor kwargs, img_size)``: what was asked, completed from the finetune
    run that wrote ``weights`` when ``model`` is None or that run's model."""
    run = finetune_run_config(weights)
    kwargs: dict = {}
    if run is not None and model in (None, run["model"]):
        model = run["model"]
        kwargs = dict(run.get("model_kwargs") or {})
        if img_size is None and run.get("img_size"):
            img_size = int(run["img_size"])
    return model or DIGITS_MODEL, kwargs, img_size


def default_img_size(model_name: str) -> int:
    """The input size of ``model_name``'s pretrained configuration in timm (224 when it has none)."""
    import timm

    try:
        cfg = timm.models.get_pretrained_cfg(model_name)
        if cfg is not None and cfg.input_size:
            return int(cfg.input_size[-1])
    except Exception:  # names without a pretrained config
        pass
    return 224


def digits_config(pretrain_config: dict | None = None):
    """The digits ViT's ``DigitsConfig`` with ``pretrain_config``'s overrides (ValueError naming an
    unknown field or a bad value)."""
    from .digits import DigitsConfig

    fields = {f.name for f in dataclasses.fields(DigitsConfig)}
    unknown = sorted(set(pretrain_config or {}) - fields)
    if unknown:
        raise ValueError(f"pretrain_config: unknown DigitsConfig field(s) {unknown}; known: {sorted(fields)}")
    try:
        return DigitsConfig(**(pretrain_config or {}))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"pretrain_config: {exc}") from None


def check_digits_options(model_kwargs: dict | None, img_size: int | None,
                         pretrain_config: dict | None = None) -> int:
    """The digits ViT's input size; ValueError when ``--model-arg`` or another ``--img-size`` is asked
    of its fixed architecture."""
    size = digits_config(pretrain_config).img_size
    if img_size is not None and img_size != size:
        raise ValueError(f"--img-size {img_size}: {DIGITS_MODEL} takes {size}x{size} images")
    if model_kwargs:
        raise ValueError(f"--model-arg does not apply to {DIGITS_MODEL} (its architecture is fixed)")
    return size


def input_size(net, img_size: int | None = None) -> int:
    """The model's own input size (``patch_embed.img_size``), else ``img_size`` (a model without one
    takes images resized to it), else ValueError."""
    size = getattr(getattr(net, "patch_embed", None), "img_size", None)
    if isinstance(size, (tuple, list)) and size:
        return int(size[-1])
    if isinstance(size, int):
        return size
    if img_size is None:
        raise ValueError(f"--img-size is needed: cannot read the input size of {type(net).__name__}")
    return int(img_size)


def build_model(name: str, num_classes: int, *, weights=None, model_kwargs: dict | None = None,
                img_size: int | None = None, allow_partial: bool = False, cache_dir=None, seed: int = 0,
                pretrain_config: dict | None = None, progress: bool = False,
                warn_random_init: bool = True) -> BuiltModel:
    """The model ``name`` with its weights, in eval mode on the CPU (see the module docstring).

    A timm model gets a ``num_classes`` head and is built for ``img_size`` (None: timm's default);
    ``warn_random_init=False`` silences the random-init warning of a model without ``weights``.
    ``cache_dir``, ``seed``, ``pretrain_config`` and ``progress`` concern the digits ViT's one-time
    pretraining. Random initialisation draws from the torch RNG (callers seed it).
    """
    from .timm_models import create_vit
    from .weights import load_weights

    if name == DIGITS_MODEL:
        from .digits import build_digits_vit, checkpoint_info, digits_checkpoint, pretrained_digits_vit

        check_digits_options(model_kwargs, img_size, pretrain_config)
        cfg = digits_config(pretrain_config)
        if weights is None:
            net = pretrained_digits_vit(cache_dir, seed=seed, progress=progress, config=cfg)
            path = digits_checkpoint(cache_dir, seed=seed, progress=progress, config=cfg)
            acc = float(checkpoint_info(path).get("val_acc", "nan"))
            desc = (f"digits ViT (timm {cfg.model}: img {cfg.img_size}, patch {cfg.patch_size}, dim "
                    f"{cfg.embed_dim}, depth {cfg.depth}), pretrained here on digits {cfg.classes} (val acc "
                    f"{acc:.3f}), cached at {path}")
        else:
            net = load_weights(build_digits_vit(cfg), weights, allow_partial=allow_partial)
            desc = f"digits ViT architecture with weights {weights}"
        return BuiltModel(net.eval(), cfg.img_size, desc, DIGITS_MODEL, {})
    kwargs = dict(model_kwargs or {})
    with warnings.catch_warnings():
        if weights is None and not warn_random_init:
            warnings.filterwarnings("ignore", message=".*no weights given.*")
        net = create_vit(name, num_classes, img_size=img_size, weights=weights, allow_partial=allow_partial,
                         **kwargs)
    desc = f"{name} ({'weights ' + str(weights) if weights else 'random init'})"
    return BuiltModel(net.eval(), input_size(net, img_size), desc, name, kwargs)
