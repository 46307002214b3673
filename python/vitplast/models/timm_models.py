"""A timm model by name: :func:`create_vit`, the one function that creates a model (the digits ViT and
every timm model of :mod:`vitplast.models.builder` come from it); nothing is downloaded.

``create_vit(name, num_classes, img_size=None, weights=None, allow_partial=False, **timm_kwargs)``:
``weights=None`` gives random init, with a ``UserWarning`` (random-init ViTs rank components almost
opposite to pretrained ones, so a measurement of one is rarely what is wanted); a local checkpoint is
loaded by :func:`vitplast.models.weights.load_weights`. ``img_size`` is passed to timm only when the
model's constructor takes it (ViTs do; ResNets do not: the images are then simply resized to
``img_size``).
"""

from __future__ import annotations

import os
import warnings

from torch import nn

from .weights import load_weights


def create_vit(name: str, num_classes: int, img_size: int | None = None,
               weights: str | os.PathLike | None = None, *, allow_partial: bool = False,
               **timm_kwargs) -> nn.Module:
    """A timm model ``name`` with a ``num_classes`` head, in eval mode, float32, on CPU.

    ``img_size`` (int) is passed to timm when the model takes it (position embeddings sized for it;
    checkpoint ones are resampled); ``timm_kwargs`` go to ``timm.create_model`` (e.g. ``patch_size``,
    ``depth``, ``embed_dim``). ``weights``: a local checkpoint (see the module docstring) or None for
    random init (warns). Raises ``ValueError`` for an unknown model name or arguments it does not take.
    """
    import timm

    if not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes must be an int >= 0, got {num_classes!r}")
    if not isinstance(name, str) or not timm.is_model(name):
        close = timm.list_models(f"*{name.split('_')[0]}*")[:8] if isinstance(name, str) and name else []
        raise ValueError(f"model {name!r} is not a timm model name"
                         f"{'; similar: ' + ', '.join(close) if close else ''}")
    kwargs = dict(timm_kwargs)
    if img_size is not None:
        kwargs["img_size"] = img_size
    try:
        model = timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    except TypeError as exc:
        if "img_size" in kwargs and "img_size" in str(exc) and "img_size" not in timm_kwargs:
            kwargs.pop("img_size")  # a model without an input size (ResNets): images are just resized
            model = _create(timm, name, num_classes, kwargs)
        else:
            raise ValueError(_rejected(name, kwargs, timm_kwargs, exc)) from None
    if weights is None:
        warnings.warn(f"{name}: no weights given, using random init; random-init ViTs rank components "
                      f"almost opposite to pretrained ones (pass weights=PATH / --weights PATH)",
                      stacklevel=2)
    else:
        load_weights(model, weights, allow_partial=allow_partial)
    return model.eval()


def _create(timm, name: str, num_classes: int, kwargs: dict) -> nn.Module:
    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    except TypeError as exc:
        raise ValueError(_rejected(name, kwargs, kwargs, exc)) from None


def _rejected(name: str, kwargs: dict, given: dict, exc: TypeError) -> str:
    """The message for constructor arguments timm refused: the ones its error names (an unexpected
    keyword), else those the user gave (``img_size`` only when the user gave it)."""
    text = str(exc)
    named = [k for k in kwargs if f"'{k}'" in text]
    blamed = named or sorted(given) or sorted(kwargs)
    what = "argument" if len(blamed) == 1 else "arguments"
    return f"model {name!r} does not take the {what} {', '.join(blamed)} (--model-arg): {text}"
