"""Loading a local checkpoint's tensors into a built model (nothing is downloaded).

``load_weights(model, weights, allow_partial=False)``:

- a state-dict checkpoint (``.safetensors`` / ``.pth`` / ``.pt`` / ``.bin`` / ``.ckpt``, or a
  ``vitplast finetune`` run directory; read by `vitplast.models.checkpoints`: wrappers, prefixes and LoRA
  adapters handled, a wrapper's prefix fitted to the model's names) is passed through the model family's
  timm ``checkpoint_filter_fn`` when it has one (resamples position embeddings to the model's input size,
  converts patch embeddings), then loaded. Only the classifier head
  (`vitplast.models.heads.head_prefixes`) may stay at its random init (typically when the number of
  classes differs); a checkpoint that leaves any other tensor at random init, or holds
  tensors the model does not have, does not fit the architecture: `WeightsError`, unless
  ``allow_partial=True`` (then a warning lists them);
- ``*.npz`` -> timm's loader for big_vision / JAX checkpoints (``model.load_pretrained``), for the models
  that have one (VisionTransformer and relatives).
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Mapping

import torch
from torch import nn

from .checkpoints import CheckpointError, read_checkpoint
from .heads import head_prefixes


class WeightsError(CheckpointError):
    """A checkpoint that does not fit the model (tensors left at random init beyond the head, or extra)."""


def _is_floating(dtype) -> bool:
    """Whether ``dtype`` (a torch dtype, or a safetensors header's dtype name: ``F32``, ``BF16``, ``I64``,
    ``BOOL``, ...) is a floating type."""
    return dtype.upper().startswith(("F", "BF")) if isinstance(dtype, str) else bool(dtype.is_floating_point)


def refuse_non_floating(model: nn.Module, dtypes: Mapping[str, object], source: str, *,
                        own: Mapping[str, torch.Tensor] | None = None, renamed: bool = False) -> None:
    """`WeightsError` (its message starting with ``source``, the option or file the tensors come from)
    when a checkpoint holds an integer, boolean or complex tensor where ``model`` holds a floating one of
    that name: loading would cast it to floats in silence. ``dtypes`` maps the checkpoint's tensor names
    (as the model names them) to tensors or dtypes (a torch dtype or a safetensors dtype name); ``own``:
    the model's tensors by name (default: its state dict). ``renamed``: the loader renames the
    checkpoint's tensors (transformers does), so a name the model lacks is refused too when every
    tensor of the model is floating. The one check of every loading path: ``--weights``, timm's
    ``pretrained_cfg_overlay`` file and a transformers model's own weights file."""
    own = model.state_dict() if own is None else own
    all_floating = all(t.is_floating_point() for t in own.values() if isinstance(t, torch.Tensor))
    bad = []
    for name, value in dtypes.items():
        dtype = value.dtype if isinstance(value, torch.Tensor) else value
        mine = own.get(name)
        floating_here = (mine.is_floating_point() if isinstance(mine, torch.Tensor) else
                         renamed and name not in own and all_floating)
        if floating_here and not _is_floating(dtype):
            bad.append(f"{name} ({dtype})")
    if bad:
        more = f" ... ({len(bad)} in all)" if len(bad) > 4 else ""
        raise WeightsError(f"{source} holds non-floating tensors where {type(model).__name__} has floating "
                           f"ones: {', '.join(bad[:4])}{more}; integer or boolean tensors are not weights "
                           "and are not cast: pass the checkpoint of the model's floating weights")


def load_weights(model: nn.Module, weights: str | os.PathLike, *, allow_partial: bool = False) -> nn.Module:
    """Load a local checkpoint into ``model`` in place (see the module docstring); returns ``model``.

    Raises ``FileNotFoundError`` when ``weights`` does not exist, `CheckpointError` for an unknown,
    unreadable or corrupt file, `WeightsError` when it does not fit (see ``allow_partial``).
    """
    own = model.state_dict()
    path, state = read_checkpoint(weights, names=own)
    source = f"weights: {str(path)!r}"
    if state is None:  # a .npz archive: timm's loader for big_vision / JAX checkpoints
        if not hasattr(model, "load_pretrained"):
            raise WeightsError(f"weights: {type(model).__name__} has no loader for .npz checkpoints (timm "
                               f"supports them for VisionTransformer-family models); convert {str(path)!r} "
                               "to .safetensors or .pth")
        try:
            model.load_pretrained(str(path))
        except Exception as exc:  # a foreign or truncated archive: numpy/zipfile/KeyError of many kinds
            raise WeightsError(f"{source} is not a big_vision .npz checkpoint of {type(model).__name__}: "
                               f"{type(exc).__name__}: {str(exc)[:200]}") from None
        return model
    refuse_non_floating(model, state, source, own=own)
    # the timm checkpoint_filter_fn(state_dict, model) of the model's family, if it has one
    filt = getattr(sys.modules.get(type(model).__module__), "checkpoint_filter_fn", None)
    if filt is not None and len(inspect.signature(filt).parameters) >= 2:
        try:
            state = filt(state, model)
        except Exception as exc:  # a filter written for another layout: load the raw keys instead
            warnings.warn(f"weights: timm's checkpoint filter for {type(model).__name__} failed "
                          f"({type(exc).__name__}: {exc}); loading keys as they are", stacklevel=3)
        refuse_non_floating(model, state, source, own=own)  # the names the filter gave, too
    if not any(k in own for k in state):
        raise WeightsError(f"{source} shares no tensor name with {type(model).__name__} "
                           f"(checkpoint keys start {sorted(state)[:3]}, model keys {sorted(own)[:3]})")
    shapes = {k: (tuple(own[k].shape), tuple(v.shape)) for k, v in state.items()
              if k in own and v.shape != own[k].shape}
    state = {k: v for k, v in state.items() if k not in shapes}
    heads = head_prefixes(model)
    random_init = sorted(k for k in own if k not in state)
    misfit = _misfit(model, [k for k in random_init if not k.startswith(heads)],
                     sorted(k for k in state if k not in own), shapes, len(own))
    if misfit and not allow_partial:
        raise WeightsError(f"{source} does not fit {type(model).__name__}: {misfit}. Check --model/"
                           "--img-size against the checkpoint, or pass --allow-partial-weights "
                           "(allow_partial=True) to load what fits")
    model.load_state_dict(state, strict=False)
    if head_left := [k for k in random_init if k.startswith(heads)]:
        warnings.warn(f"weights: the classifier head ({', '.join(head_left)}) is left at random init"
                      f"{' (the checkpoint head has other shapes: another num_classes)' if shapes else ''}",
                      stacklevel=3)
    if misfit:
        warnings.warn(f"weights: loaded partially (allow_partial): {misfit}", stacklevel=3)
    return model


def _misfit(model, left: list[str], unexpected: list[str], shapes: dict, n_own: int) -> str:
    parts = []
    if left:
        detail = ", ".join(f"{k}: expected shape {shapes[k][0]}, found {shapes[k][1]}" if k in shapes
                           else f"{k} (absent)" for k in left[:4])
        parts.append(f"{len(left)} of {n_own} tensors of {type(model).__name__} besides the head would stay "
                     f"at random init ({detail}{' ...' if len(left) > 4 else ''})")
    if unexpected:
        parts.append(f"{len(unexpected)} checkpoint tensor(s) have no place in the model "
                     f"({', '.join(unexpected[:4])}{' ...' if len(unexpected) > 4 else ''})")
    return "; ".join(parts)
