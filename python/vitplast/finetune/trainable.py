"""What a finetuning run trains: ``--train`` choices on any model the capture can measure.

``--train`` choices (parsed and resolved by :mod:`vitplast.finetune.selection`, through the same
component map as the capture: a detected preset, or ``{LABEL: GLOB}``):

- ``MHA``, ``FC1``, ``FC2``, ``LN1``, ``LN2``: that component in **every** layer, plus the head
  (the paper's component-wise protocol); ``MHA@3``, ``FC1@0-2``, ``MHA@-1``: only those layers.
  Several join with ``+`` (``MHA+FC2``, ``MHA@3+FC1@0``).
- ``full``: every parameter; ``head``: the classifier only (linear probing);
- ``lora``: peft LoRA adapters on attention (its linear layers in the component map) plus the head
  (peft is an optional dependency: ``pip install 'vitplast-kernels[lora]'``);
- ``auto``: measure plasticity first, then train the highest-plasticity components that fit a
  budget of trainable parameters (:func:`choose_components`); ``auto@layer``: the same over
  (component, layer) units (:func:`choose_units`), e.g. ``MHA@3+FC1@2``.

Layer-scale parameters, embeddings and the final norm belong to no component: only ``full`` trains them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import nn

from . import selection
from .selection import count_parameters, set_trainable

# the one component list (the capture's, selection.COMPONENTS: LN1, MHA, LN2, FC1, FC2 in block order),
# in the display and default-grid order of `vitplast finetune` / `claim`: the components with weight
# matrices first, then the LayerNorms, each in block order -> MHA, FC1, FC2, LN1, LN2
COMPONENTS = tuple(sorted(selection.COMPONENTS, key=lambda c: c.startswith("LN")))
SPECIAL = selection.SPECIAL
TRAIN_CHOICES = COMPONENTS + SPECIAL
AUTO_LAYER = selection.AUTO_LAYER

__all__ = ["COMPONENTS", "SPECIAL", "TRAIN_CHOICES", "apply_lora", "check_train_syntax", "choose_components",
           "choose_units", "component_parameter_names", "count_parameters", "freeze_list", "head_module",
           "labels", "lora_config", "lora_target_modules", "lora_target_parts", "parse_train",
           "select_trainable", "set_trainable", "trainable_names"]


def labels(components: Mapping | None = None) -> tuple[str, ...]:
    """The component labels ``--train`` may name: the map's (``--component LABEL=GLOB``), else the
    presets' (:data:`COMPONENTS`)."""
    return tuple(components) if components else COMPONENTS


def parse_train(spec: str, components: Mapping | None = None) -> tuple[str, ...]:
    """``"MHA+FC2"`` -> ``("MHA", "FC2")``, ``"mha@3"`` -> ``("MHA@3",)``; validates every part
    (case-insensitive for components) against :func:`labels` of ``components``. ``auto@layer`` stands
    alone like ``auto``."""
    return selection.parse_train(spec, labels(components))


def check_train_syntax(spec: str) -> str:
    """``spec`` if it is well formed whatever the labels (they are checked against the map later)."""
    selection.parse_train(spec, None)
    return spec


LORA_DEFAULT = ("MHA",)  # what --train lora adapts without --lora-targets: every layer's attention


def lora_target_parts(spec: str | None, components=None) -> tuple[str, ...]:
    """The parts ``--lora-targets`` names (``"MHA@2-3+FC1"`` -> ``("MHA@2-3", "FC1")``), or
    :data:`LORA_DEFAULT` for None."""
    return LORA_DEFAULT if spec is None else parse_train(spec, components)


def head_module(model: nn.Module) -> nn.Module:
    """The classifier (timm's ``get_classifier()``, else ``model.head`` / ``model.classifier``)."""
    head = selection.head_module(model)
    if head is None:
        raise ValueError(f"model {type(model).__name__} has no classifier head (get_classifier/head)")
    return head


def component_parameter_names(model: nn.Module, components=None) -> dict[str, list[str]]:
    """Parameter names per group: each component (all layers), ``head``, and ``other``."""
    return selection.parameter_groups(model, components)


def trainable_names(model: nn.Module, train: str | Sequence[str], components=None) -> list[str]:
    """Names of the parameters ``train`` makes trainable (no change to the model). ``lora``/``auto``
    are not plain selections: resolve them first (:func:`apply_lora`, :func:`choose_components`)."""
    parts = parse_train(train, components) if isinstance(train, str) else tuple(train)
    if AUTO_LAYER in parts:
        raise ValueError("trainable_names: resolve --train auto@layer before selecting parameters")
    return selection.trainable_names(model, parts, components)


def select_trainable(model: nn.Module, train: str | Sequence[str], components=None) -> list[str]:
    """Freeze ``model`` except what ``train`` selects; returns the trainable parameter names."""
    names = trainable_names(model, train, components)
    set_trainable(model, names)
    return names


def _component_means(plasticity) -> dict[str, float]:
    """``{component: mean plasticity over layers}`` from a PlasticityResult or a mapping."""
    if isinstance(plasticity, Mapping):
        return {str(k): float(v) for k, v in plasticity.items()}
    return {str(c): plasticity.overall(c) for c in plasticity.components}


def choose_components(
    plasticity, model: nn.Module, budget: int | None = None, *, include_head: bool = True, components=None
) -> list[str]:
    """Components to train, highest plasticity first, whose parameters (plus the head's) fit ``budget``.

    ``plasticity`` is a ``PlasticityResult`` or a ``{component: value}`` mapping (non-finite values
    and unknown components are skipped). Greedy: a component that does not fit is skipped and the
    next, smaller one may still fit. ``budget=None`` keeps only the single best component.
    ``components``: the component map (``{label: glob}``; default: the model's preset).
    """
    means = _component_means(plasticity)
    known = labels(components)
    ranked = sorted((c for c in known if c in means and means[c] == means[c]), key=lambda c: -means[c])
    if not ranked:
        raise ValueError(f"no plasticity for any of {', '.join(known)} (got {sorted(means)})")
    if budget is None:
        return ranked[:1]
    if budget <= 0:
        raise ValueError(f"--budget must be a positive number of parameters, got {budget}")
    groups = component_parameter_names(model, components)
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


def choose_units(plasticity: Mapping[str, Sequence[float]], model: nn.Module, budget: int, *,
                 components=None, include_head: bool = True) -> list[str]:
    """(component, layer) units to train, highest plasticity first, whose parameters (plus the
    head's) fit ``budget``: greedy like :func:`choose_components` over every unit. ``plasticity``:
    ``{component: [value per layer]}`` (a monitor record's ``"plasticity"``; NaN layers skipped).
    Returns ``--train`` parts such as ``["MHA@3", "FC1@2"]``."""
    if not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"--budget must be a positive number of parameters, got {budget}")
    sizes = selection.unit_sizes(model, components)
    units = [(c, li, float(v)) for c, per in plasticity.items() for li, v in enumerate(per)
             if (c, li) in sizes and v == v]
    if not units:
        raise ValueError(f"no plasticity for any (component, layer) of the model (got {sorted(plasticity)})")
    units.sort(key=lambda u: -u[2])
    used = count_parameters(model, selection.head_names(model)) if include_head else 0
    if used > budget:
        raise ValueError(f"--budget {budget} is smaller than the head alone ({used} parameters)")
    chosen = []
    for c, li, _ in units:
        if sizes[(c, li)] and used + sizes[(c, li)] <= budget:
            chosen.append(f"{c}@{li}")
            used += sizes[(c, li)]
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


def lora_target_modules(model: nn.Module, parts: Sequence[str], components=None) -> list[str]:
    """Qualified names of the linear layers LoRA should wrap for ``parts`` (``"MHA"``, ``"FC1@2"``...:
    the modules of the component map ``components`` (default: the preset); LNs have none)."""
    return selection.lora_targets(model, tuple(parts), components)


def _has_lora_target(model: nn.Module, component: str, components=None) -> bool:
    try:
        return bool(selection.lora_targets(model, (component,), components))
    except ValueError:
        return False


def lora_config(
    plasticity_or_components, model: nn.Module, *, budget: int | None = None, r: int = 8,
    alpha: int = 16, dropout: float = 0.0, components=None,
):
    """A peft ``LoraConfig`` targeting the chosen components' linear layers, the head kept trainable.

    ``plasticity_or_components``: a PlasticityResult / ``{component: plasticity}`` mapping (the top
    components are chosen with :func:`choose_components` and ``budget``), or a list of component
    names such as ``["MHA"]`` or ``["MHA@-2--1"]``. ``components``: the component map (``{label:
    glob}``; default: the model's preset).
    """
    peft = _import_peft()
    if isinstance(plasticity_or_components, (list, tuple)):
        parts = [parse_train(c, components)[0] for c in plasticity_or_components]
    else:
        means = _component_means(plasticity_or_components)
        lora_able = {c: v for c, v in means.items()
                     if c in labels(components) and _has_lora_target(model, c, components)}
        parts = choose_components(lora_able, model, budget, components=components)
    head_name = next(n for n, m in model.named_modules() if m is head_module(model))
    return peft.LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout,
        target_modules=lora_target_modules(model, parts, components), modules_to_save=[head_name],
    )


def apply_lora(model: nn.Module, config=None, *, r: int = 8, alpha: int = 16, components=None,
               targets: str | None = None) -> nn.Module:
    """Wrap ``model`` with peft LoRA (default: ``targets``, a ``--train``-style spec such as
    ``"MHA@2-3+FC1"``, else the attention, component ``MHA`` of the map ``components`` or the preset:
    the ``--train lora`` baseline). Returns the peft model; only adapters and the head are trainable."""
    peft = _import_peft()
    if config is None:
        config = lora_config(list(lora_target_parts(targets, components)), model, r=r, alpha=alpha,
                             components=components)
    return peft.get_peft_model(model, config)
