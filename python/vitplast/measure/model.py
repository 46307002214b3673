"""The model ``vitplast measure`` measures: the embedded digits ViT or any timm model, its weights, and
the capture of its components (presets, or ``--component``/``--embedding`` for any model).

A ``vitplast finetune`` run directory (or its ``checkpoint.pt`` / ``model.safetensors``) given as
weights also gives the architecture when ``--model`` is not given or names the run's model: the run's
``config.json`` holds the model, its constructor arguments and image size.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path

DIGITS_MODEL = "digits-vit"  # same name as `vitplast finetune --model`


@dataclasses.dataclass
class BuiltModel:
    net: object  # torch.nn.Module
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


def default_img_size(model_name: str) -> int:
    import timm

    try:
        cfg = timm.models.get_pretrained_cfg(model_name)
        if cfg is not None and cfg.input_size:
            return int(cfg.input_size[-1])
    except Exception:  # names without a pretrained config
        pass
    return 224


def _model_img_size(model, fallback: int) -> int:
    size = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if isinstance(size, (tuple, list)) and size:
        return int(size[-1])
    if isinstance(size, int):
        return size
    return fallback


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


def digits_img_size(img_size: int | None, pretrain_config: dict | None) -> int:
    """The digits ViT's input size (checks ``pretrain_config`` and ``img_size``)."""
    cfg = _digits_config(pretrain_config)
    if img_size is not None and img_size != cfg.img_size:
        raise ValueError(f"img_size={img_size}: the digits ViT takes {cfg.img_size}x{cfg.img_size} images")
    return cfg.img_size


def _digits_config(pretrain_config: dict | None):
    from vitplast.common.digits import DigitsConfig

    fields = {f.name for f in dataclasses.fields(DigitsConfig)}
    unknown = sorted(set(pretrain_config or {}) - fields)
    if unknown:
        raise ValueError(f"pretrain_config: unknown DigitsConfig field(s) {unknown}; known: {sorted(fields)}")
    try:
        return DigitsConfig(**(pretrain_config or {}))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"pretrain_config: {exc}") from None


def build(name: str, timm_kwargs: dict, weights, img_size: int | None, num_classes: int, *,
          allow_partial: bool, cache_dir, seed: int, pretrain_config: dict | None,
          progress: bool) -> BuiltModel:
    """The model to measure, with its weights, in eval mode on the CPU."""
    if name == DIGITS_MODEL:
        from vitplast.common.digits import build_digits_vit, checkpoint_info, digits_checkpoint

        cfg = _digits_config(pretrain_config)
        if weights is None:
            path = digits_checkpoint(cache_dir, seed=seed, progress=progress, config=cfg)
            info = checkpoint_info(path)
            net = build_digits_vit(cfg, weights=path)
            desc = (f"digits ViT (timm {cfg.model}: img {cfg.img_size}, patch {cfg.patch_size}, dim "
                    f"{cfg.embed_dim}, depth {cfg.depth}), pretrained here on digits {cfg.classes} (val acc "
                    f"{float(info.get('val_acc', 'nan')):.3f}), cached at {path}")
        else:
            from vitplast.common.models import load_weights

            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*no weights given.*")
                net = build_digits_vit(cfg)
            load_weights(net, weights, allow_partial=allow_partial)
            desc = f"digits ViT architecture with weights {weights}"
        return BuiltModel(net.eval(), cfg.img_size, desc, DIGITS_MODEL, {})
    from vitplast.common.models import create_vit

    size = img_size or default_img_size(name)
    net = create_vit(name, num_classes, img_size=size, weights=weights, allow_partial=allow_partial,
                     **timm_kwargs)
    desc = f"{name} ({'weights ' + str(weights) if weights else 'random init'})"
    return BuiltModel(net, _model_img_size(net, size), desc, name, timm_kwargs)


def make_capture(net, model_name: str, *, protocol: str, pairs: str, components, embedding):
    """The (not yet attached) capture of ``net``: raises ValueError when its components or embedding
    cannot be found, with the options that name them."""
    import vitplast_kernels

    try:
        return vitplast_kernels.capture(net, protocol=protocol, pairs=pairs, components=components,
                                        embedding=embedding)
    except ValueError as exc:
        if components is not None or "no component found" not in str(exc):
            raise
        names = [n for n, _ in net.named_modules() if n][:8]
        raise ValueError(
            f"{model_name}: no preset knows its components ({type(net).__name__}); name them with "
            f"--component LABEL=GLOB (repeatable; python: components={{label: glob}}), globs over module "
            f"names such as {names}, '*' standing for the layer index, and for --protocol decomposition "
            f"--embedding NAME"
        ) from None
