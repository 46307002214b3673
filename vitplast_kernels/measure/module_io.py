"""What a hook sees of a module call: its input tensor, its output tensor, its head count, its width.

Plain functions of modules and call arguments, traceable by ``torch.compile`` (no identity caches, no
host state).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

INPUT_KWARGS = ("hidden_states", "x", "input", "inputs_embeds", "hidden_state")
HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_head", "n_heads")
PROJ_NAMES = ("proj", "out_proj", "o_proj", "c_proj", "output.dense", "dense", "wo")


def first_tensor(obj: Any) -> torch.Tensor | None:
    """``obj`` if it is a tensor, else the first tensor of a tuple/list/mapping (one level), else None."""
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, (tuple, list)):
        for x in obj:
            if isinstance(x, torch.Tensor):
                return x
    if isinstance(obj, Mapping):
        for x in obj.values():
            if isinstance(x, torch.Tensor):
                return x
    return None


def input_of(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The tensor a module call reads as its input: the first positional tensor, else a known keyword."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    for k in INPUT_KWARGS:
        if isinstance(kwargs.get(k), torch.Tensor):
            return kwargs[k]
    return first_tensor(tuple(args)) or first_tensor(kwargs)


def num_heads(module: torch.nn.Module) -> int | None:
    """The attention head count found on ``module`` or a submodule (one of `HEAD_ATTRS`)."""
    for m in module.modules():
        for a in HEAD_ATTRS:
            v = getattr(m, a, None)
            if isinstance(v, int) and v > 0:
                return v
    return None


def in_width(module: torch.nn.Module, name: str) -> int:
    """The input width of a linear layer (``nn.Linear``, HF ``Conv1D``): what FC2's ``e`` is padded to."""
    if isinstance(getattr(module, "in_features", None), int):
        return module.in_features
    w = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(w, torch.Tensor):  # HF GPT-2: weight (in, out)
        return w.shape[0]
    raise ValueError(
        f"protocol='decomposition' pads e to FC2's input width, but {name} ({type(module).__name__}) "
        "exposes no in_features: map FC2 to an nn.Linear"
    )
