"""What a capture measures, resolved once when it is made: the embedding module (decomposition), the
token slice, and the output projection and head count of every MHA (per-head rates)."""

from __future__ import annotations

import torch

from . import presets as _presets
from .module_io import HEAD_ATTRS, PROJ_NAMES, num_heads


def find_embedding(named: dict[str, torch.nn.Module], embedding: str | None) -> tuple[str, bool]:
    """``(module name, is_input)`` of the decomposition's ``e``: a module's output or its first input."""
    if embedding is None:
        raise ValueError(
            "protocol='decomposition' needs embedding='<module name>' (its output is e) or "
            "'<module name>:input' (its first input is e), e.g. 'blocks.0:input'"
        )
    name, _, which = embedding.partition(":")
    if which not in ("", "input"):
        raise ValueError(f"embedding must be '<module name>' or '<module name>:input', got {embedding!r}")
    found = _presets.match(name, named)
    if len(found) != 1:
        raise ValueError(f"embedding {embedding!r} must match exactly one module, matched {len(found)}")
    return next(iter(found.values())), which == "input"


def token_slice(model: torch.nn.Module, tokens: str, prefix_tokens: int | None) -> slice | None:
    """The token dim slice of ``tokens="cls" | "patches"`` (None for ``"all"``)."""
    if tokens == "all":
        return None
    if prefix_tokens is None:
        m = getattr(model, "_orig_mod", model)
        prefix_tokens = getattr(m, "num_prefix_tokens", None)
    if not isinstance(prefix_tokens, int):
        raise ValueError(
            f"tokens={tokens!r} needs the number of prefix tokens (class/register tokens before "
            "the patches): the model has no num_prefix_tokens attribute, pass prefix_tokens=N"
        )
    if prefix_tokens < 0:
        raise ValueError(f"prefix_tokens must be >= 0, got {prefix_tokens}")
    if tokens == "cls":
        if prefix_tokens < 1:
            raise ValueError("tokens='cls' but the model has no prefix (class) token")
        return slice(0, 1)
    return slice(prefix_tokens, None)


def find_heads(modules: dict, named: dict[str, torch.nn.Module], layer_index: dict,
               proj_name: str | None) -> dict[int, tuple[str, int]]:
    """Per layer index: the MHA's output projection (module name) and its head count."""
    if "MHA" not in modules:
        raise ValueError("per_head=True needs an 'MHA' component")
    heads_of: dict[int, tuple[str, int]] = {}
    for key, names in modules["MHA"].items():
        mha = named[names[0]]
        heads = num_heads(mha)
        sub = dict(mha.named_modules())
        cands = [proj_name] if proj_name else list(PROJ_NAMES)
        proj = next((c for c in cands if c in sub), None)
        if heads is None or proj is None:
            raise ValueError(
                f"per_head=True: could not find the head count (attributes {HEAD_ATTRS}) or the output "
                f"projection (one of {cands}) inside {names[0]} ({type(mha).__name__})"
            )
        heads_of[layer_index[key]] = (f"{names[0]}.{proj}", heads)
    return heads_of
