"""A timm model by name: `create_vit`, the one function that creates a timm model (the digits ViT
and every timm model of `vitplast.models.builder` come from it), and what the model says of itself
afterwards: its data config (`timm_data_config`) and where its pretrained weights came from
(`pretrained_origin`); `build_timm`, the timm family's builder, puts them together.

``create_vit(name, num_classes, img_size=None, weights=None, pretrained=False, allow_partial=False,
**timm_kwargs)``: ``name`` is any name ``timm.create_model`` takes (a registry name, with a pretrained
tag, ``hf-hub:ORG/NAME``, ``local-dir:DIR``). ``pretrained=True`` is timm's own loading: the Hugging Face
hub and its local cache (``HF_HUB_OFFLINE`` honoured), or the file of a ``pretrained_cfg_overlay``;
``weights`` is a local checkpoint loaded by `vitplast.models.weights.load_weights`; with neither,
random init, with a ``UserWarning`` (random-init ViTs rank components almost opposite to pretrained
ones). ``img_size`` is passed to timm only when the model's constructor takes it (ViTs do; ResNets do
not: the images are then simply resized to ``img_size``).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import TYPE_CHECKING

from torch import nn

from ..data.transforms import from_data_config
from .built import BuildRequest, BuiltModel, input_size
from .checkpoints import align_prefix, read_checkpoint
from .hub import cached_hub_file, hub_error, offline_unless_reachable, split_revision
from .sources import check_config_args, model_arg_files
from .weights import load_weights, refuse_non_floating

if TYPE_CHECKING:
    from .sources import ModelPlan


def create_vit(name: str, num_classes: int, img_size: int | None = None,
               weights: str | os.PathLike | None = None, *, pretrained: bool = False,
               allow_partial: bool = False, **timm_kwargs) -> nn.Module:
    """A timm model ``name`` with a ``num_classes`` head, in eval mode, float32, on CPU.

    ``img_size`` (int) is passed to timm when the model takes it (position embeddings sized for it;
    checkpoint ones are resampled); ``timm_kwargs`` go to ``timm.create_model`` (e.g. ``patch_size``,
    ``depth``, ``embed_dim``). ``weights``: a local checkpoint (see the module docstring) or None for
    random init (warns); ``pretrained``: timm's weights (see the module docstring). Raises ``ValueError``
    for an unknown model name, arguments it does not take, or pretrained weights that cannot be had.
    """
    import timm

    if not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes must be an int >= 0, got {num_classes!r}")
    check_timm_name(name)
    check_config_args(timm_kwargs)
    overlays = _overlay_dtypes(timm_kwargs) if pretrained else {}
    kwargs = dict(timm_kwargs) if img_size is None else {**timm_kwargs, "img_size": img_size}
    if any(not d.is_floating_point for dtypes in overlays.values() for d in dtypes.values()):
        # integer or boolean tensors: checked against the model's own before timm loads (and casts) them:
        # `refuse_non_floating` for each file of `_overlay_dtypes`, its names fitted to the model's
        bare = _create(timm, name, num_classes, False, kwargs, timm_kwargs)
        own = bare.state_dict()
        for what, dtypes in overlays.items():
            refuse_non_floating(bare, align_prefix(dtypes, own), what, own=own)
    model = _create(timm, name, num_classes, pretrained, kwargs, timm_kwargs)
    if weights is None and not pretrained:
        warnings.warn(f"{name}: no weights given, using random init; random-init ViTs rank components "
                      f"almost opposite to pretrained ones (pass weights=PATH / --weights PATH)",
                      stacklevel=2)
    elif weights is not None:
        load_weights(model, weights, allow_partial=allow_partial)
    return model.eval()


def _overlay_dtypes(timm_kwargs: dict) -> dict[str, dict]:
    """``{what: {tensor name: dtype}}`` of the files a ``--model-arg`` names for timm to read, each read
    as ``--weights`` would be before timm reads it (``what``: the option and the file, as errors name
    them); a ``.npz`` archive, left to its loader, has no entry."""
    found = {}
    for what, path in model_arg_files(timm_kwargs).items():
        state = read_checkpoint(path, what)[1]
        if state is not None:
            found[f"{what} {str(path)!r}"] = {k: v.dtype for k, v in state.items()}
    return found


def check_timm_name(name: str) -> None:
    """ValueError unless ``name`` is a name ``timm.create_model`` takes: a registry name (tags too), or
    ``hf-hub:``/``local-dir:`` with an id (those are read when the model is created)."""
    import timm

    if isinstance(name, str) and name.partition(":")[0] in ("hf-hub", "hf_hub", "local-dir"):
        if not name.partition(":")[2]:
            raise ValueError(f"model {name!r}: expected an id after the prefix (hf-hub:ORG/NAME, "
                             "local-dir:DIR)")
        return
    if not isinstance(name, str) or not timm.is_model(name):
        close = timm.list_models(f"*{name.split('_')[0]}*")[:8] if isinstance(name, str) and name else []
        similar = f"; similar: {', '.join(close)}" if close else ""
        raise ValueError(f"model {name!r} is not a timm model name (nor hf-hub:ORG/NAME, local-dir:DIR, or "
                         f"hf:ID_OR_DIR for a transformers model){similar}")


def _create(timm, name: str, num_classes: int, pretrained: bool, kwargs: dict, given: dict) -> nn.Module:
    """``timm.create_model``, its errors as ValueErrors that say what to do; again without ``img_size``
    (popped from ``kwargs``) when the model does not take it and the user did not give it (a ResNet: its
    images are simply resized). Constructor arguments timm refused are named: the ones its error names (an
    unexpected keyword), else those the user gave (``img_size`` only when the user gave it)."""
    try:
        with offline_unless_reachable() if pretrained else contextlib.nullcontext():
            return timm.create_model(name, pretrained=pretrained, num_classes=num_classes, **kwargs)
    except TypeError as exc:
        named = [k for k in kwargs if f"'{k}'" in str(exc)]
        if "img_size" in named and "img_size" not in given:
            kwargs.pop("img_size")
            return _create(timm, name, num_classes, pretrained, kwargs, given)
        blamed = named or sorted(given) or sorted(kwargs)
        what = "argument" if len(blamed) == 1 else "arguments"
        raise ValueError(f"model {name!r} does not take the {what} {', '.join(blamed)} (--model-arg): "
                         f"{exc}") from None
    except Exception as exc:  # hub lookups (offline, not cached), unknown tags, missing published weights
        reason = hub_error(exc)
        if reason is None and not isinstance(exc, (RuntimeError, ValueError, OSError, AssertionError)):
            raise
        if pretrained:
            raise ValueError(f"--pretrained: timm cannot load the weights of {name}: "
                             f"{reason or _first_line(exc)}; or pass --weights FILE") from None
        raise ValueError(f"--model {name}: {reason or _first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    """The start of ``exc``'s message on one line (a load error's first lines name the tensors)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (" ".join(lines[:3]) if lines else type(exc).__name__)[:300]


def timm_data_config(model: nn.Module) -> dict:
    """The model's own input preparation, as timm resolves it from its pretrained config
    (``timm.data.resolve_model_data_config``): ``input_size``, ``interpolation``, ``mean``, ``std``,
    ``crop_pct``, ``crop_mode``."""
    from timm.data import resolve_model_data_config

    return dict(resolve_model_data_config(model))


def pretrained_origin(model: nn.Module) -> dict:
    """Where timm's pretrained weights of ``model`` come from: ``{"file": path}`` for a local file or
    folder, ``{"hub_id", "revision", "file"}`` for the hub (the file in the local cache when there)."""
    config = dict(getattr(model, "pretrained_cfg", None) or {})
    if config.get("file"):
        return {"file": str(config["file"])}
    if config.get("hf_hub_id"):
        repo, revision = split_revision(str(config["hf_hub_id"]))
        names = [config["hf_hub_filename"]] if config.get("hf_hub_filename") else []
        return {"hub_id": repo, **cached_hub_file(repo, [*names, "model.safetensors", "pytorch_model.bin"],
                                                  revision)}
    if config.get("url"):
        return {"url": str(config["url"])}
    return {}


def build_timm(plan: ModelPlan, request: BuildRequest) -> BuiltModel:
    """The timm family's `BuiltModel`: the timm model with a ``request.num_classes`` head, timm's
    published weights with ``plan.pretrained``, else random init (``plan.weights``, which the builder
    loads over it, or ``plan.random_init``); its input preparation is timm's data config at its input
    size."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no weights given.*")  # random init is asked for
        net = create_vit(plan.source.ref, request.num_classes, img_size=plan.img_size,
                         pretrained=plan.pretrained, **plan.model_kwargs)
    if plan.weights is not None:
        origin, how = {"kind": "weights", "file": str(plan.weights)}, f"weights {plan.weights}"
    elif plan.pretrained:
        origin = {"kind": "pretrained", **pretrained_origin(net)}
        how = f"timm's pretrained weights{' from ' + origin['hub_id'] if origin.get('hub_id') else ''}"
    else:
        origin, how = {"kind": "random"}, "random init"
    size = input_size(net, plan.img_size)
    transform = from_data_config(timm_data_config(net), f"timm data config of {plan.source.name}")
    return BuiltModel(net.eval(), size, f"{plan.source.name} ({how})", plan.source.name,
                      dict(plan.model_kwargs), transform.resized(size), origin)
