"""What ``--train`` selects, on any model the capture can measure: specs resolved through the
**component map** of ``vitplast_kernels.measure.presets`` (a detected preset, or ``{LABEL: GLOB}`` as
``vitplast measure --component LABEL=GLOB`` takes it).

A spec is one or more parts joined with ``+``:

- ``MHA``, ``FC1``, ... (any label of the map, case-insensitive): that component in **every** layer, plus the
  head (the paper's component-wise protocol);
- ``MHA@3``: layer 3 only; ``FC1@0-2``: layers 0 to 2 (inclusive); ``MHA@-1``: the last layer; ``LN1@-2--1``:
  the last two. A layer is an index into the map's layers in block order (what ``vitplast measure`` prints as
  layer 0, 1, ...);
- ``head``: the classifier only (linear probing), which every component selection also trains;
- ``full``: every parameter; ``lora``: LoRA adapters (`.lora`) of rank ``--lora-r``, ``lora:r=N`` of rank
  N; ``auto`` and ``auto@layer``: chosen by plasticity under a parameter budget (`.auto`). These four
  stand alone.

A parameter belongs to the component whose module is the **innermost** one holding it: in the ``hf-bert``
preset MHA is the whole ``attention`` block, which contains LN1 (``attention.output.LayerNorm``), so ``MHA``
trains the attention's linears and ``LN1`` the LayerNorm, never both. Parameters of no component (embeddings,
final norm, layer scales) are trained only by ``full``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from torch import nn

from vitplast_kernels.measure import presets
from vitplast_kernels.measure.targets import resolve_components

from ..models.heads import head_names

COMPONENTS = presets.COMPONENTS  # ("LN1", "MHA", "LN2", "FC1", "FC2"): the component map's, in block order
# the default order of `--train`, of claim's `--components` and of the tables: the components with
# weight matrices first, then the LayerNorms, each in block order -> MHA, FC1, FC2, LN1, LN2
TRAIN_ORDER = tuple(sorted(COMPONENTS, key=lambda c: c.startswith("LN")))
SPECIAL = ("full", "head", "lora", "auto")
TRAIN_CHOICES = TRAIN_ORDER + SPECIAL
AUTO_LAYER = "auto@layer"  # auto over (component, layer) units; stands alone like auto
_LAYERS = re.compile(r"^(-?\d+)(?:-(-?\d+))?$")
MAX_LORA_RANK = 4096  # beyond any linear layer's width that LoRA would sensibly adapt
_LORA_RANK = re.compile(r"^\s*lora\s*:\s*r\s*=\s*(\d+)\s*$", re.IGNORECASE)  # lora:r=N
Globs = Mapping[str, presets.Pattern] | None  # a component map as ``--component`` gives it (None: the preset)


# ------------------------------------------------------------------------------------------ parsing
def split_part(part: str) -> tuple[str, str | None]:
    """``"MHA@0-2"`` -> ``("MHA", "0-2")``; ``"MHA"`` -> ``("MHA", None)``."""
    label, sep, layers = part.partition("@")
    return label, (layers if sep else None)


def layer_range(text: str) -> tuple[int, int]:
    """``"3"`` -> ``(3, 3)``, ``"0-2"`` -> ``(0, 2)``, ``"-2--1"`` -> ``(-2, -1)``; ValueError otherwise."""
    m = _LAYERS.match(text.strip())
    if m is None:
        raise ValueError(f"layers {text!r}: expected N, A-B (inclusive) or a negative index such as -1")
    lo, hi = m.groups()
    return int(lo), int(lo if hi is None else hi)


def labels(components: Mapping | None = None) -> tuple[str, ...]:
    """The component labels ``--train`` may name: the map's (``--component LABEL=GLOB``), else the presets'
    (`TRAIN_ORDER`)."""
    return tuple(components) if components else TRAIN_ORDER


def parse_train(spec: str, components: Mapping | None = None, *, any_label: bool = False) -> tuple[str, ...]:
    """Canonical parts of ``spec`` (``"mha@3+head"`` -> ``("MHA@3", "head")``), duplicates dropped. Errors do
    not name the option: the caller's error style adds ``--train: ``.

    Component labels are checked (case-insensitive) against `labels` of ``components``; ``any_label`` accepts
    any label (checked later against the model's map, `resolve`)."""
    allowed = None if any_label else labels(components)
    choices = ", ".join([*(allowed or ("LABEL",)), *SPECIAL, AUTO_LAYER])
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"must be one of {choices} (components join with +, LABEL@LAYERS restricts one "
                         "to layers, e.g. MHA@3, FC1@0-2, MHA@-1)")
    lookup = {c.lower(): c for c in allowed} if allowed is not None else None
    parts = []
    for text in (raw.strip() for raw in spec.split("+")):
        label, layers = split_part(text)
        label = label.strip()
        if layers is not None and f"{label}@{layers.strip()}".lower() == AUTO_LAYER:
            parts.append(AUTO_LAYER)
        elif layers is None and label.lower() in SPECIAL:
            parts.append(label.lower())
        elif not label or label.lower() in SPECIAL:
            raise ValueError(f"{text!r}: only a component can be restricted to layers (e.g. MHA@3), not "
                             f"{label or 'nothing'!r}")
        elif lookup is not None and label.lower() not in lookup:
            raise ValueError(f"unknown choice {label!r}; expected one of {choices} (several join with +, "
                             "grid values with commas)")
        else:
            label = lookup[label.lower()] if lookup is not None else label
            if layers is not None:
                lo, hi = layer_range(layers)
                label += f"@{lo}" if lo == hi else f"@{lo}-{hi}"
            parts.append(label)
    if len(parts) > 1 and any((p in SPECIAL and p != "head") or p == AUTO_LAYER for p in parts):
        raise ValueError(f"{spec!r}: full, lora, auto and auto@layer cannot be combined with other choices")
    return tuple(dict.fromkeys(parts))


class TrainPlan(str):
    """One ``--train`` value, parsed once: the text as given (what run names and config.json record; it
    compares and hashes as that string) and its canonical ``parts`` (`parse_train`). Options validation makes
    one of every ``--train`` value; the rest of finetuning reads ``parts``."""

    parts: tuple[str, ...]
    lora_rank: int | None  # the rank of ``lora:r=N`` (None: --lora-r's)

    def __new__(cls, text: str, parts: Sequence[str], lora_rank: int | None = None) -> TrainPlan:
        plan = super().__new__(cls, text)
        plan.parts, plan.lora_rank = tuple(parts), lora_rank
        return plan

    def __reduce__(self):
        return (TrainPlan, (str(self), self.parts, self.lora_rank))

    @classmethod
    def parse(cls, text: str, components: Mapping | None = None, *, any_label: bool = False) -> TrainPlan:
        """``text`` parsed (see `parse_train`); ``text`` itself when it is a plan already."""
        if isinstance(text, TrainPlan):
            return text
        if isinstance(text, str) and (m := _LORA_RANK.match(text)):
            if not 1 <= int(m[1]) <= MAX_LORA_RANK:
                raise ValueError(f"{text!r}: a LoRA rank must be in 1..{MAX_LORA_RANK}")
            return cls(text, ("lora",), int(m[1]))
        return cls(text, parse_train(text, components, any_label=any_label))

    @property
    def is_auto(self) -> bool:
        """``auto`` or ``auto@layer``: the parts are chosen by plasticity when the run starts."""
        return self.parts in (("auto",), (AUTO_LAYER,))

    @property
    def is_lora(self) -> bool:
        return self.parts == ("lora",)


def check_train_syntax(spec: str) -> str:
    """``spec`` if it is well formed whatever the labels (they are checked against the map later)."""
    TrainPlan.parse(spec, any_label=True)
    return spec


# ------------------------------------------------------------------------------------------ the map
@dataclass(frozen=True)
class ComponentMap:
    """A model's components as the capture sees them. ``layers``: layer labels in block order; ``modules``:
    ``{label: {layer index: module names}}``; ``preset``: the detected preset's name (None for a given
    mapping)."""

    labels: tuple[str, ...]
    layers: tuple[str, ...]
    modules: dict[str, dict[int, tuple[str, ...]]]
    preset: str | None

    def label(self, name: str) -> str:
        """The map's label for ``name`` (case-insensitive); ValueError naming the labels there are."""
        if name in self.labels:
            return name
        found = [c for c in self.labels if c.lower() == name.lower()]
        if len(found) != 1:
            raise ValueError(f"--train: component {name!r} is not in the model's component map "
                             f"({', '.join(self.labels)}); name it with --component {name}=GLOB")
        return found[0]

    def layer_indices(self, label: str, layers: str | None) -> list[int]:
        """Layer indices of ``label`` selected by ``layers`` (None: all its layers)."""
        if layers is None:
            return sorted(self.modules[label])
        lo, hi = layer_range(layers)
        n = len(self.layers)
        a, b = (lo + n if lo < 0 else lo), (hi + n if hi < 0 else hi)
        if not (0 <= a < n and 0 <= b < n):
            raise ValueError(f"--train {label}@{layers}: layer out of range; the model has {n} layers "
                             f"(0 to {n - 1}, or -{n} to -1)")
        if a > b:
            raise ValueError(f"--train {label}@{layers}: empty layer range (first {lo} after last {hi})")
        if missing := [i for i in range(a, b + 1) if i not in self.modules[label]]:
            raise ValueError(f"--train {label}@{layers}: {label} has no module in layer(s) "
                             f"{', '.join(self.layers[i] for i in missing)}")
        return list(range(a, b + 1))


def component_map(model: nn.Module, components: Globs = None) -> ComponentMap:
    """The component map of ``model``: ``components`` (``{label: glob}``) or the detected preset, as the
    capture resolves it (`vitplast_kernels.measure.targets.resolve_components`), with the layers indexed in
    block order."""
    resolved = resolve_components(model, components, None)
    index = {k: i for i, k in enumerate(resolved.layer_keys)}
    modules = {c: {index[k]: mods for k, mods in resolved.modules[c].items()} for c in resolved.components}
    layers = tuple(".".join(k) or "0" for k in resolved.layer_keys)
    return ComponentMap(resolved.components, layers, modules, resolved.preset)


def _owners(model: nn.Module, cmap: ComponentMap) -> dict[str, tuple[str, int]]:
    """``{parameter name: (label, layer)}`` for the parameters of some component: the innermost component
    module holding the parameter owns it."""
    by_module: dict[str, tuple[str, int]] = {}
    for label, per_layer in cmap.modules.items():
        for li, mods in per_layer.items():
            for m in mods:
                if m in by_module and by_module[m] != (label, li):
                    raise ValueError(f"module {m!r} is in two components ({by_module[m][0]} and {label}): "
                                     "a parameter can be trained as one component only")
                by_module[m] = (label, li)
    out = {}
    for pname, _ in model.named_parameters():
        holders = [pname.rsplit(".", k)[0] for k in range(1, pname.count(".") + 1)]  # innermost first
        if owners := [by_module[m] for m in holders if m in by_module]:
            out[pname] = owners[0]
    return out


# ------------------------------------------------------------------------------------------ resolving
@dataclass(frozen=True)
class Selection:
    """What a spec trains: ``names`` (parameter names, model order, head included), ``units`` (the selected
    ``(label, layer index)`` pairs) and ``modules`` (their module names)."""

    spec: tuple[str, ...]
    names: list[str]
    units: list[tuple[str, int]]
    modules: list[str]


def resolve_selection(model: nn.Module, train: str | Sequence[str], components: Globs = None,
                      cmap: ComponentMap | None = None) -> Selection:
    """The parameters ``train`` selects on ``model`` (nothing is changed). ``lora``, ``auto`` and
    ``auto@layer`` are not plain selections: resolve them first (`.lora`, `.auto`)."""
    parts = TrainPlan.parse(train, any_label=True).parts if isinstance(train, str) else tuple(train)
    all_names = [n for n, _ in model.named_parameters()]
    if "full" in parts:
        return Selection(parts, all_names, [], [])
    if {"lora", "auto", AUTO_LAYER} & set(parts):
        raise ValueError("resolve --train lora, auto and auto@layer before selecting parameters "
                         "(lora.apply_lora, auto.choose_components, auto.choose_units)")
    head = head_names(model)
    if "head" in parts and not head:
        raise ValueError(f"--train head: {type(model).__name__} has no classifier head "
                         "(get_classifier(), .head, .fc or .classifier)")
    units, owners, modules = [], {}, []
    if comp_parts := [p for p in parts if p not in SPECIAL]:
        cmap = cmap or component_map(model, components)
        for label, layers in map(split_part, comp_parts):
            label = cmap.label(label)
            units += [(label, li) for li in cmap.layer_indices(label, layers)]
        units = list(dict.fromkeys(units))
        owners = _owners(model, cmap)
        if empty := [u for u in units if u not in owners.values()]:
            label, li = empty[0]
            raise ValueError(f"--train {label}@{li}: its module(s) {list(cmap.modules[label][li])} hold no "
                             "parameter of their own")
        modules = [m for label, li in units for m in cmap.modules[label][li]]
    wanted = set(head) | {n for n, u in owners.items() if u in units}
    return Selection(parts, [n for n in all_names if n in wanted], units, modules)


def select_trainable(model: nn.Module, train: str | Sequence[str], components: Globs = None,
                     cmap: ComponentMap | None = None) -> list[str]:
    """Freeze ``model`` except what ``train`` selects; returns the trainable parameter names, in model order
    (``requires_grad = True`` exactly for them, False elsewhere; ``cmap``: the model's component map when it
    was resolved already)."""
    names = resolve_selection(model, train, components, cmap).names
    wanted = set(names)
    for n, p in model.named_parameters():
        p.requires_grad_(n in wanted)
    return names


def count_parameters(model: nn.Module, names: Iterable[str] | None = None) -> int:
    """Number of scalars in ``names`` (all parameters when None)."""
    params = dict(model.named_parameters())
    return sum(params[n].numel() for n in (params if names is None else names))


def parameter_groups(model: nn.Module, components: Globs = None) -> dict[str, list[str]]:
    """Parameter names per component label (all layers), ``head`` and ``other`` (everything else)."""
    cmap = component_map(model, components)
    owners, head = _owners(model, cmap), set(head_names(model))
    groups: dict[str, list[str]] = {**{c: [] for c in cmap.labels}, "head": [], "other": []}
    for n, _ in model.named_parameters():
        groups["head" if n in head else owners[n][0] if n in owners else "other"].append(n)
    return groups


def unit_sizes(model: nn.Module, components: Globs = None) -> dict[tuple[str, int], int]:
    """``{(label, layer index): trainable-parameter count}`` of every (component, layer)."""
    return part_sizes(model, components).units


@dataclass(frozen=True)
class PartSizes:
    """Trainable-parameter counts of a model's parts, read in one pass: per component label (all layers), per
    (label, layer index) unit, the classifier head and the whole model."""

    components: dict[str, int]
    units: dict[tuple[str, int], int]
    head: int
    total: int


def part_sizes(model: nn.Module, components: Globs = None) -> PartSizes:
    """The `PartSizes` of ``model`` under its component map (``components``: ``--component``)."""
    cmap = component_map(model, components)
    params = dict(model.named_parameters())
    units = {(c, li): 0 for c, per in cmap.modules.items() for li in per}
    for n, unit in _owners(model, cmap).items():
        units[unit] += params[n].numel()
    per_label = {c: sum(size for (u, _), size in units.items() if u == c) for c in cmap.labels}
    return PartSizes(per_label, units, count_parameters(model, head_names(model)), count_parameters(model))
