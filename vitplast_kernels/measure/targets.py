"""What a capture measures, resolved once when it is made: the components and their modules per layer,
the embedding module (decomposition), the token slice, and the output projection and head count of
every MHA (per-head rates)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from . import presets as _presets
from .mha_heads import check_batch_first
from .module_io import HEAD_ATTRS, PROJ_NAMES, num_heads


@dataclass(frozen=True)
class Components:
    """The resolved component map: ``components`` in report order, ``modules`` ``{label: {layer key:
    module names}}``, the layer keys in block order, the preset's name, embedding and MHA projection."""

    components: tuple[str, ...]
    modules: dict
    layer_keys: list
    preset: str | None
    embedding: str | None
    proj: str | None


def resolve_components(model: torch.nn.Module, components: Mapping[str, _presets.Pattern] | None,
                       embedding: str | None) -> Components:
    """``components`` (or the detected preset's) resolved against ``model``'s modules."""
    proj, preset = None, None
    if components is None:
        p = _presets.detect(model)
        components, proj, preset = p.components, p.proj, p.name
        embedding = embedding if embedding is not None else p.embedding
    elif not isinstance(components, Mapping) or not components:
        raise ValueError("components must be a non-empty mapping {label: module-name pattern}")
    order = [c for c in _presets.COMPONENTS if c in components]
    order += [c for c in components if c not in order]
    layer_keys, modules = _presets.resolve(model, {c: components[c] for c in order})
    return Components(tuple(order), modules, layer_keys, preset, embedding, proj)


def model_name(model: torch.nn.Module) -> str:
    """The name a figure or table shows for ``model``: timm's architecture name
    (``pretrained_cfg["architecture"]``), a Hugging Face model's ``name_or_path``, else the class name."""
    cfg = getattr(model, "pretrained_cfg", None)
    if isinstance(cfg, Mapping) and isinstance(cfg.get("architecture"), str) and cfg["architecture"]:
        return cfg["architecture"]
    name = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "name_or_path",
                                                             None)
    if isinstance(name, str) and name:
        return name
    return type(model).__name__


def device_of(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (CPU for a model with neither)."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


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
    """Per layer index: the module whose call shows the heads and the head count. That module is the
    MHA's output projection (its input is the heads' outputs, concatenated), or an
    ``nn.MultiheadAttention`` inside the MHA component (its per-head outputs are recomputed from its
    call, `.mha_heads`)."""
    if "MHA" not in modules:
        raise ValueError("per_head=True needs an 'MHA' component")
    heads_of: dict[int, tuple[str, int]] = {}
    for key, names in modules["MHA"].items():
        mha = named[names[0]]
        torch_mha = [(n, m) for n, m in mha.named_modules() if isinstance(m, torch.nn.MultiheadAttention)]
        if len(torch_mha) == 1:
            sub_name, m = torch_mha[0]
            full = f"{names[0]}.{sub_name}" if sub_name else names[0]
            check_batch_first(m, full)
            heads_of[layer_index[key]] = (full, m.num_heads)
            continue
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
