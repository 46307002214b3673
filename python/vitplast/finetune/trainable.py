"""What a finetuning run trains: parameter selection for any timm ViT.

``--train`` choices:

- ``MHA``, ``FC1``, ``FC2``, ``LN1``, ``LN2``: that component in **every** block, plus the head
  (the paper's component-wise protocol). Several join with ``+`` (``MHA+FC2``).
- ``full``: every parameter; ``head``: the classifier only (linear probing);
- ``lora``: peft LoRA adapters on attention (``attn.qkv``, ``attn.proj``) plus the head (peft is an
  optional dependency: ``pip install 'vitplast-kernels[lora]'``);
- ``auto``: measure plasticity first, then train the highest-plasticity components that fit a
  budget of trainable parameters (:func:`choose_components`).

A *block* is any submodule with ``norm1``, ``attn``, ``norm2`` and ``mlp`` (``mlp.fc1``/``mlp.fc2``):
timm's ViT, DeiT, BEiT, EVA and Swin blocks all have this layout. Layer-scale parameters
(``ls1``/``ls2``), embeddings and the final norm belong to no component: only ``full`` trains them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

COMPONENTS = ("MHA", "FC1", "FC2", "LN1", "LN2")
SPECIAL = ("full", "head", "lora", "auto")
TRAIN_CHOICES = COMPONENTS + SPECIAL

# component -> attribute path inside a block
_COMPONENT_PATHS = {
    "MHA": "attn",
    "FC1": "mlp.fc1",
    "FC2": "mlp.fc2",
    "LN1": "norm1",
    "LN2": "norm2",
}
# modules peft can wrap with LoRA, per component (LayerNorms have none)
_LORA_TARGETS = {"MHA": ("attn.qkv", "attn.proj"), "FC1": ("mlp.fc1",), "FC2": ("mlp.fc2",)}


def _get(module: nn.Module, path: str) -> nn.Module | None:
    for part in path.split("."):
        module = getattr(module, part, None)
        if not isinstance(module, nn.Module):
            return None
    return module


def find_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Transformer blocks of ``model`` in forward order, as ``(qualified name, module)``."""
    blocks = []
    for name, mod in model.named_modules():
        if all(_get(mod, p) is not None for p in _COMPONENT_PATHS.values()):
            blocks.append((name, mod))
    if not blocks:
        raise ValueError(
            "model has no transformer blocks with norm1/attn/norm2/mlp.fc1/mlp.fc2 submodules "
            f"(got {type(model).__name__}); pass a timm vision transformer"
        )
    return blocks


def parse_train(spec: str) -> tuple[str, ...]:
    """``"MHA+FC2"`` -> ``("MHA", "FC2")``; validates every part (case-insensitive for components)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"--train must be one of {', '.join(TRAIN_CHOICES)} (or several joined by +)")
    parts = []
    lookup = {c.lower(): c for c in TRAIN_CHOICES}
    for raw in spec.split("+"):
        key = raw.strip().lower()
        if key not in lookup:
            raise ValueError(
                f"--train: unknown choice {raw.strip()!r}; expected one of {', '.join(TRAIN_CHOICES)} "
                "(several components join with +, grid values with commas)"
            )
        parts.append(lookup[key])
    if len(parts) > 1 and any(p in SPECIAL and p != "head" for p in parts):
        raise ValueError(f"--train {spec!r}: full, lora and auto cannot be combined with other choices")
    return tuple(dict.fromkeys(parts))


def component_modules(model: nn.Module, component: str) -> dict[str, nn.Module]:
    """``{qualified name: module}`` of ``component`` in every block (one entry per block)."""
    if component not in _COMPONENT_PATHS:
        raise ValueError(f"component must be one of {', '.join(COMPONENTS)}, got {component!r}")
    path = _COMPONENT_PATHS[component]
    out = {}
    for bname, block in find_blocks(model):
        out[f"{bname}.{path}" if bname else path] = _get(block, path)
    return out


def head_module(model: nn.Module) -> nn.Module:
    """The classifier (timm's ``get_classifier()``, else ``model.head``)."""
    head = model.get_classifier() if hasattr(model, "get_classifier") else getattr(model, "head", None)
    if not isinstance(head, nn.Module):
        raise ValueError(f"model {type(model).__name__} has no classifier head (get_classifier/head)")
    return head


def _names_of(model: nn.Module, modules: Iterable[nn.Module]) -> list[str]:
    wanted = {id(p) for m in modules for p in m.parameters()}
    return [n for n, p in model.named_parameters() if id(p) in wanted]


def component_parameter_names(model: nn.Module) -> dict[str, list[str]]:
    """Parameter names per group: each component, ``head``, and ``other`` (everything else)."""
    groups = {c: _names_of(model, component_modules(model, c).values()) for c in COMPONENTS}
    groups["head"] = _names_of(model, [head_module(model)])
    taken = {n for names in groups.values() for n in names}
    groups["other"] = [n for n, _ in model.named_parameters() if n not in taken]
    return groups


def trainable_names(model: nn.Module, train: str | Sequence[str]) -> list[str]:
    """Names of the parameters ``train`` makes trainable (no change to the model). ``lora``/``auto``
    are not plain selections: resolve them first (:func:`apply_lora`, :func:`choose_components`)."""
    parts = parse_train(train) if isinstance(train, str) else tuple(train)
    if "full" in parts:
        return [n for n, _ in model.named_parameters()]
    if "lora" in parts or "auto" in parts:
        raise ValueError("trainable_names: resolve --train lora/auto before selecting parameters")
    groups = component_parameter_names(model)
    wanted = set(groups["head"])
    for c in parts:
        if c in COMPONENTS:
            wanted.update(groups[c])
    return [n for n, _ in model.named_parameters() if n in wanted]


def set_trainable(model: nn.Module, names: Iterable[str]) -> int:
    """``requires_grad = True`` exactly for ``names``, False elsewhere; returns the trainable count."""
    names = set(names)
    known = {n for n, _ in model.named_parameters()}
    missing = names - known
    if missing:
        raise ValueError(f"set_trainable: no such parameters: {sorted(missing)[:5]}")
    total = 0
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
        total += p.numel() if n in names else 0
    return total


def select_trainable(model: nn.Module, train: str | Sequence[str]) -> list[str]:
    """Freeze ``model`` except what ``train`` selects; returns the trainable parameter names."""
    names = trainable_names(model, train)
    set_trainable(model, names)
    return names


def count_parameters(model: nn.Module, names: Iterable[str] | None = None) -> int:
    """Number of scalars in ``names`` (all parameters when None)."""
    params = dict(model.named_parameters())
    return sum(params[n].numel() for n in (params if names is None else names))


def _component_means(plasticity) -> dict[str, float]:
    """``{component: mean plasticity over layers}`` from a PlasticityResult or a mapping."""
    if isinstance(plasticity, Mapping):
        return {str(k): float(v) for k, v in plasticity.items()}
    out = {}
    for c in plasticity.components:
        per_layer = torch.as_tensor(plasticity.mean(c), dtype=torch.float64)
        out[str(c)] = float(per_layer[torch.isfinite(per_layer)].mean())
    return out


def choose_components(
    plasticity, model: nn.Module, budget: int | None = None, *, include_head: bool = True
) -> list[str]:
    """Components to train, highest plasticity first, whose parameters (plus the head's) fit ``budget``.

    ``plasticity`` is a ``PlasticityResult`` or a ``{component: value}`` mapping (non-finite values
    and unknown components are skipped). Greedy: a component that does not fit is skipped and the
    next, smaller one may still fit. ``budget=None`` keeps only the single best component.
    """
    means = _component_means(plasticity)
    ranked = sorted(
        (c for c in COMPONENTS if c in means and means[c] == means[c]), key=lambda c: -means[c]
    )
    if not ranked:
        raise ValueError(f"no plasticity for any of {', '.join(COMPONENTS)} (got {sorted(means)})")
    if budget is None:
        return ranked[:1]
    if budget <= 0:
        raise ValueError(f"--budget must be a positive number of parameters, got {budget}")
    groups = component_parameter_names(model)
    used = count_parameters(model, groups["head"]) if include_head else 0
    if used > budget:
        raise ValueError(f"--budget {budget} is smaller than the head alone ({used} parameters)")
    chosen = []
    for c in ranked:
        size = count_parameters(model, groups[c])
        if used + size <= budget:
            chosen.append(c)
            used += size
    return chosen


def freeze_list(plasticity, model: nn.Module, budget: int | None = None) -> list[str]:
    """Parameter names to **freeze** so that only the components :func:`choose_components` picks
    (plus the head) train: the complement of the trainable set."""
    keep = set(trainable_names(model, choose_components(plasticity, model, budget)))
    return [n for n, _ in model.named_parameters() if n not in keep]


def _import_peft():
    try:
        import peft
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "LoRA needs the optional dependency peft: "
            "pip install 'vitplast-kernels[lora]' (or pip install peft)"
        ) from exc
    return peft


def lora_target_modules(model: nn.Module, components: Sequence[str]) -> list[str]:
    """Qualified names of the linear layers LoRA should wrap for ``components`` (LNs have none)."""
    targets = []
    for bname, _ in find_blocks(model):
        for c in components:
            for path in _LORA_TARGETS.get(c, ()):
                targets.append(f"{bname}.{path}" if bname else path)
    if not targets:
        raise ValueError(
            f"no LoRA-able linear layers in components {list(components)} (LayerNorms have none)"
        )
    return targets


def lora_config(
    plasticity_or_components, model: nn.Module, *, budget: int | None = None, r: int = 8,
    alpha: int = 16, dropout: float = 0.0,
):
    """A peft ``LoraConfig`` targeting the chosen components' linear layers, the head kept trainable.

    ``plasticity_or_components``: a PlasticityResult / ``{component: plasticity}`` mapping (the top
    components are chosen with :func:`choose_components` and ``budget``), or a list of component
    names such as ``["MHA"]``.
    """
    peft = _import_peft()
    if isinstance(plasticity_or_components, (list, tuple)):
        components = [parse_train(c)[0] for c in plasticity_or_components]
    else:
        means = _component_means(plasticity_or_components)
        lora_able = {c: v for c, v in means.items() if c in _LORA_TARGETS}
        components = choose_components(lora_able, model, budget)
    head_name = next(n for n, m in model.named_modules() if m is head_module(model))
    return peft.LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout,
        target_modules=lora_target_modules(model, components), modules_to_save=[head_name],
    )


def apply_lora(model: nn.Module, config=None, *, r: int = 8, alpha: int = 16) -> nn.Module:
    """Wrap ``model`` with peft LoRA (default: attention, the ``--train lora`` baseline). Returns the
    peft model; only adapters and the head are trainable."""
    peft = _import_peft()
    if config is None:
        config = lora_config(["MHA"], model, r=r, alpha=alpha)
    return peft.get_peft_model(model, config)
