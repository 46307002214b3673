"""Build any timm model, optionally with weights from a local checkpoint (nothing is downloaded).

``create_vit(name, num_classes, img_size=None, weights=None, **timm_kwargs)``:

- ``weights=None`` -> random init, with a ``UserWarning`` (random-init ViTs rank components almost
  opposite to pretrained ones, so a measurement of one is rarely what is wanted);
- ``*.safetensors`` / ``*.pth`` / ``*.pt`` / ``*.bin`` -> a state dict (also inside ``{"state_dict": ..}``,
  ``{"model": ..}``; ``module.`` / ``_orig_mod.`` prefixes removed), passed through the model family's
  timm ``checkpoint_filter_fn`` when it has one (resamples position embeddings to ``img_size``, converts
  patch embeddings), then loaded; tensors whose shape still differs (typically the classifier head when
  ``num_classes`` differs) are left at their random init with a warning;
- ``*.npz`` -> timm's loader for big_vision / JAX checkpoints (``model.load_pretrained``), for the models
  that have one (VisionTransformer and relatives).
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings

from torch import nn

STATE_DICT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")
NPZ_SUFFIXES = (".npz",)


def _filter_for(model: nn.Module):
    """The timm ``checkpoint_filter_fn(state_dict, model)`` of the model's family, or None."""
    module = sys.modules.get(type(model).__module__)
    fn = getattr(module, "checkpoint_filter_fn", None)
    if fn is None:
        return None
    params = list(inspect.signature(fn).parameters)
    return fn if len(params) >= 2 else None


def load_weights(model: nn.Module, weights: str | os.PathLike) -> nn.Module:
    """Load a local checkpoint into ``model`` in place (see the module docstring); returns ``model``.

    Raises ``FileNotFoundError`` when ``weights`` does not exist, ``ValueError`` for an unknown file type
    or a checkpoint that shares no tensor with the model.
    """
    path = os.fspath(weights)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"weights: no such file {path!r}")
    suffix = os.path.splitext(path)[1].lower()
    if suffix in NPZ_SUFFIXES:
        if not hasattr(model, "load_pretrained"):
            raise ValueError(f"weights: {type(model).__name__} has no loader for .npz checkpoints "
                             f"(timm supports them for VisionTransformer-family models); convert "
                             f"{path!r} to .safetensors or .pth")
        model.load_pretrained(path)
        return model
    if suffix not in STATE_DICT_SUFFIXES:
        raise ValueError(f"weights: unknown checkpoint type {suffix!r} for {path!r}; expected one of "
                         f"{STATE_DICT_SUFFIXES + NPZ_SUFFIXES}")
    from timm.models import load_state_dict

    state = load_state_dict(path, use_ema=True, device="cpu", weights_only=True)
    filt = _filter_for(model)
    if filt is not None:
        try:
            state = filt(state, model)
        except Exception as exc:  # a filter written for another layout: load the raw keys instead
            warnings.warn(f"weights: timm's checkpoint filter for {type(model).__name__} failed "
                          f"({type(exc).__name__}: {exc}); loading keys as they are", stacklevel=3)
    own = model.state_dict()
    mismatched = sorted(k for k, v in state.items()
                        if k in own and tuple(v.shape) != tuple(own[k].shape))
    for k in mismatched:
        del state[k]
    matched = [k for k in state if k in own]
    if not matched:
        raise ValueError(f"weights: {path!r} shares no tensor name with {type(model).__name__} "
                         f"(checkpoint keys start {sorted(state)[:3]}, model keys {sorted(own)[:3]})")
    result = model.load_state_dict(state, strict=False)
    if mismatched:
        shapes = ", ".join(f"{k} {tuple(own[k].shape)}" for k in mismatched[:6])
        warnings.warn(f"weights: {len(mismatched)} tensor(s) of {path!r} have other shapes than the model "
                      f"and were left at random init: {shapes}"
                      f"{' ...' if len(mismatched) > 6 else ''} (e.g. a head for another num_classes)",
                      stacklevel=3)
    missing = [k for k in result.missing_keys if k not in mismatched]
    if missing or result.unexpected_keys:
        warnings.warn(f"weights: {path!r} loaded with {len(missing)} missing key(s) {missing[:5]} and "
                      f"{len(result.unexpected_keys)} unexpected key(s) {result.unexpected_keys[:5]}",
                      stacklevel=3)
    return model


def create_vit(name: str, num_classes: int, img_size: int | None = None, weights: str | None = None,
               **timm_kwargs) -> nn.Module:
    """A timm model ``name`` with a ``num_classes`` head, in eval mode, float32, on CPU.

    ``img_size`` (int) is passed to timm when given (position embeddings sized for it; checkpoint ones
    are resampled); ``timm_kwargs`` go to ``timm.create_model`` (e.g. ``patch_size``, ``depth``,
    ``embed_dim``). ``weights``: a local checkpoint path (see the module docstring) or None for random
    init (warns). Raises ``ValueError`` for an unknown model name.
    """
    import timm

    if not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes must be an int >= 0, got {num_classes!r}")
    if not timm.is_model(name):
        close = timm.list_models(f"*{name.split('_')[0]}*")[:8] if name else []
        raise ValueError(f"model {name!r} is not a timm model name"
                         f"{'; similar: ' + ', '.join(close) if close else ''}")
    kwargs = dict(timm_kwargs)
    if img_size is not None:
        kwargs["img_size"] = img_size
    model = timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    if weights is None:
        warnings.warn(f"{name}: no weights given, using random init; random-init ViTs rank components "
                      f"almost opposite to pretrained ones (pass weights=PATH / --weights PATH)",
                      stacklevel=2)
    else:
        load_weights(model, weights)
    return model.eval()
