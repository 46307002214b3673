"""The one model builder of the commands: ``build_model(opts, num_classes)`` builds the model the model
options (`vitplast.options.groups.ModelOptions`) name, with its weights, its input size, its own
input preparation (an `vitplast.data.transforms.ImageTransform`) and where its weights came from.

What ``opts.model`` names (`vitplast.models.sources`):

- ``DIGITS_MODEL`` (``"digits-vit"``): the embedded ViT (`vitplast.models.digits`); without
  ``weights`` the one pretrained here on digits 0-4 (cached; pretrained first when absent), with
  ``weights`` that architecture loaded from them, with ``random_init`` its random init. Its head keeps
  the pretraining classes (a finetune run replaces it); its architecture is fixed, so ``model_kwargs``
  and another ``img_size`` are errors. It declares its own transform (digits in [-1, 1]);
- a timm name (tags, ``hf-hub:``, ``local-dir:``, a timm model folder): the timm model with a
  ``num_classes`` head (`vitplast.models.timm_models.create_vit`): timm's published weights with
  ``pretrained``, a local checkpoint with ``weights``, random init with ``random_init``; its transform
  is timm's data config;
- ``hf:ID_OR_DIR`` (or a transformers model folder): the transformers image classifier
  (`vitplast.models.hf_models`) with its weights (its config alone with ``random_init``), the head
  replaced when ``num_classes`` differs from its own; its transform is its image processor's.

``weights`` may also be a model folder (a hub snapshot, a ``save_pretrained`` directory: its
``config.json`` gives the model when ``opts.model`` is None or the same architecture), or a ``vitplast
finetune`` run directory (or its ``checkpoint.pt`` / ``model.safetensors``), whose ``config.json`` gives
the model, its constructor arguments and its image size (`resolve_architecture`).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from .sources import DIGITS_MODEL, ModelSource, model_source, weights_folder_source

if TYPE_CHECKING:
    from ..data.transforms import ImageTransform
    from ..options.groups import ModelOptions

__all__ = ["DIGITS_MODEL", "BuiltModel", "ModelPlan", "build_model", "check_digits_options", "plan_model"]


@dataclasses.dataclass
class BuiltModel:
    net: object  # torch.nn.Module, in eval mode, float32, on the CPU
    img_size: int
    description: str
    name: str
    timm_kwargs: dict
    transform: ImageTransform | None  # the model's own input preparation, at img_size (None: it has none)
    origin: dict  # where the weights came from: {"kind", and "file" / "hub_id" / "revision" / "dir"}
    trust_remote_code: bool = False  # whether the model folder's own Python code was allowed to run


@dataclasses.dataclass(frozen=True)
class ModelPlan:
    """What to build, before anything is built: the model's source, the local checkpoint loaded over it
    (``weights``), whether its published weights are loaded (``pretrained``), its constructor arguments
    and input size (None: the model's own), whether the model folder's own code may run
    (``trust_remote_code``, transformers models only)."""

    source: ModelSource
    weights: str | None
    pretrained: bool
    random_init: bool
    model_kwargs: dict
    img_size: int | None
    trust_remote_code: bool = False


def finetune_run_config(weights: str | os.PathLike | None) -> dict | None:
    """The ``config.json`` of the finetune run that wrote ``weights`` (a run directory, or a file in
    one), or None."""
    if weights is None:
        return None
    p = Path(weights).expanduser()
    folder = p if p.is_dir() else p.parent if p.name in ("checkpoint.pt", "model.safetensors") else None
    if folder is None or not (folder / "config.json").is_file():
        return None
    from .sources import read_config

    cfg = read_config(folder / "config.json")
    return cfg if isinstance(cfg, dict) and "model" in cfg and "train" in cfg else None


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


def plan_model(opts: ModelOptions) -> ModelPlan:
    """The `ModelPlan` of the model options (nothing is built; a ``weights`` folder and a finetune
    run directory give the model they hold)."""
    trust = bool(getattr(opts, "trust_remote_code", False))
    folder = weights_folder_source(opts.weights)
    if folder is not None and _same_architecture(opts.model, folder):  # a model folder: the model it holds
        source = ModelSource(folder.kind, opts.model or folder.name, folder.ref)
        return ModelPlan(source, None, True, False, dict(opts.model_kwargs), opts.img_size, trust)
    name, run_kwargs, img_size = resolve_architecture(opts.model, opts.weights, opts.img_size)
    source = model_source(name)
    pretrained = bool(opts.pretrained) or (source.kind == "hf" and not opts.random_init)
    kwargs = {**run_kwargs, **opts.model_kwargs}
    return ModelPlan(source, opts.weights, pretrained, bool(opts.random_init), kwargs, img_size, trust)


def _same_architecture(model: str | None, folder: ModelSource) -> bool:
    """Whether ``--model`` (None: not given) names the model of a ``--weights`` folder."""
    if model is None:
        return True
    if folder.kind == "hf":
        return model_source(model).kind == "hf" and model_source(model).ref == folder.ref
    from .sources import read_config

    config = read_config(Path(folder.ref.partition(":")[2]) / "config.json")
    return model.split(".")[0] == str(config.get("architecture")) or model == folder.name


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
    """The model's own input size (``patch_embed.img_size``, a transformers config's ``image_size``),
    else ``img_size`` (a model without one takes images resized to it), else ValueError."""
    size = getattr(getattr(net, "patch_embed", None), "img_size", None)
    if size is None:
        size = getattr(net, "image_size", None)
    if isinstance(size, (tuple, list)) and size:
        return int(size[-1])
    if isinstance(size, int):
        return size
    if img_size is None:
        raise ValueError(f"--img-size is needed: cannot read the input size of {type(net).__name__}")
    return int(img_size)


def build_model(opts: ModelOptions, num_classes: int, *, allow_partial: bool = False, cache_dir=None,
                seed: int = 0, pretrain_config: dict | None = None, progress: bool = False) -> BuiltModel:
    """The model the options name, with its weights, in eval mode on the CPU (see the module docstring).

    ``cache_dir``, ``seed``, ``pretrain_config`` and ``progress`` concern the digits ViT's one-time
    pretraining. Random initialisation (and a replaced head) draws from the torch RNG (callers seed it).
    """
    plan = plan_model(opts)
    if plan.source.kind == "digits":
        built = _digits(plan, allow_partial, cache_dir, seed, pretrain_config, progress)
    elif plan.source.kind == "hf":
        built = _transformers(plan, num_classes, allow_partial)
    else:
        built = _timm(plan, num_classes, allow_partial)
    warn_nonfinite_weights(built)
    return built


def warn_nonfinite_weights(built: BuiltModel) -> list[str]:
    """The names of the model's tensors holding NaN or inf, with a warning naming them (the rates of the
    components they feed are non-finite, and left out of the ranking); [] when every value is finite."""
    import torch

    bad = [k for k, v in built.net.state_dict().items()
           if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        where = built.origin.get("file") or built.origin["kind"]
        warnings.warn(f"{built.name}: {len(bad)} weight tensor(s) hold NaN or inf ({', '.join(bad[:4])}"
                      f"{' ...' if len(bad) > 4 else ''}; from {where}); the components they feed measure "
                      "non-finite rates", stacklevel=3)
    return bad


def _digits(plan: ModelPlan, allow_partial: bool, cache_dir, seed: int, pretrain_config, progress: bool):
    from ..data.transforms import ImageTransform
    from .digits import (
        SHIPPED_DIR,
        build_digits_vit,
        checkpoint_info,
        digits_checkpoint,
        pretrained_digits_vit,
    )
    from .weights import load_weights

    check_digits_options(plan.model_kwargs, plan.img_size, pretrain_config)
    cfg = digits_config(pretrain_config)
    if plan.weights is not None:
        net = load_weights(build_digits_vit(cfg), plan.weights, allow_partial=allow_partial)
        desc, origin = f"digits ViT architecture with weights {plan.weights}", {"kind": "weights",
                                                                              "file": str(plan.weights)}
    elif plan.random_init:
        net, desc, origin = build_digits_vit(cfg), "digits ViT architecture, random init", {"kind": "random"}
    else:
        net = pretrained_digits_vit(cache_dir, seed=seed, progress=progress, config=cfg)
        path = digits_checkpoint(cache_dir, seed=seed, progress=progress, config=cfg)
        acc = float(checkpoint_info(path).get("val_acc", "nan"))
        desc = (f"digits ViT (timm {cfg.model}: img {cfg.img_size}, patch {cfg.patch_size}, dim "
                f"{cfg.embed_dim}, depth {cfg.depth}), pretrained on digits {cfg.classes} (val acc "
                f"{acc:.3f}), " + ("shipped with the package" if path.parent == SHIPPED_DIR
                                   else f"cached at {path}"))
        origin = {"kind": "digits", "file": str(path)}
    # the digits are scaled to [-1, 1]: mean and std 0.5 of images in [0, 1]
    transform = ImageTransform(cfg.img_size, (0.5,) * 3, (0.5,) * 3, "bilinear", 1.0, "center", "digits-vit")
    return BuiltModel(net.eval(), cfg.img_size, desc, DIGITS_MODEL, {}, transform, origin)


def _timm(plan: ModelPlan, num_classes: int, allow_partial: bool) -> BuiltModel:
    from ..data.transforms import from_data_config
    from .timm_models import create_vit, pretrained_origin, timm_data_config

    name = plan.source.ref
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no weights given.*")  # random init is asked for
        net = create_vit(name, num_classes, img_size=plan.img_size, weights=plan.weights,
                         pretrained=plan.pretrained, allow_partial=allow_partial, **plan.model_kwargs)
    size = input_size(net, plan.img_size)
    if plan.weights is not None:
        origin, how = {"kind": "weights", "file": str(plan.weights)}, f"weights {plan.weights}"
    elif plan.pretrained:
        origin = {"kind": "pretrained", **pretrained_origin(net)}
        how = f"timm's pretrained weights{' from ' + origin['hub_id'] if origin.get('hub_id') else ''}"
    else:
        origin, how = {"kind": "random"}, "random init"
    transform = from_data_config(timm_data_config(net), f"timm data config of {plan.source.name}")
    return BuiltModel(net.eval(), size, f"{plan.source.name} ({how})", plan.source.name,
                      dict(plan.model_kwargs), transform.resized(size), origin)


def _transformers(plan: ModelPlan, num_classes: int, allow_partial: bool) -> BuiltModel:
    from ..data.transforms import from_data_config
    from .hf_models import create_hf, hf_data_config, hf_origin
    from .weights import load_weights

    net = create_hf(plan.source.ref, random_init=plan.random_init, trust_remote_code=plan.trust_remote_code,
                    **plan.model_kwargs)
    own = net.image_size
    if plan.img_size is not None and own is not None and plan.img_size != own:
        raise ValueError(f"--img-size {plan.img_size}: {plan.source.name} takes {own}x{own} images (its "
                         "config's image_size)")
    head = net.get_classifier()
    if getattr(head, "out_features", num_classes) != num_classes:
        net.reset_classifier(num_classes)
    if plan.weights is not None:
        load_weights(net, plan.weights, allow_partial=allow_partial)
        origin, how = {"kind": "weights", "file": str(plan.weights)}, f"weights {plan.weights}"
    elif plan.random_init:
        origin, how = {"kind": "random"}, "its config, random init"
    else:
        origin, how = {"kind": "pretrained", **hf_origin(plan.source.ref)}, "its pretrained weights"
    size = input_size(net, plan.img_size)
    config, source = hf_data_config(plan.source.ref, net, trust_remote_code=plan.trust_remote_code)
    transform = from_data_config(config, f"{plan.source.name}: {source}").resized(size)
    desc = f"{plan.source.name} (transformers {type(net.model).__name__}, {how})"
    return BuiltModel(net.eval(), size, desc, plan.source.name, dict(plan.model_kwargs), transform, origin,
                      plan.trust_remote_code)
