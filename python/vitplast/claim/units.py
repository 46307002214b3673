"""What a claim ranks and trains: its units. A component claim's units are whole components (``MHA``:
the component in every layer); a layer claim's are (component, layer) pairs (``MHA@3``). One analysis
and one report serve both (`.analysis`, `.report`): a unit says its name (a ``vitplast finetune
--train`` value), its component and its layer (None: every layer), and the claim's plasticity of a
unit is its component's over all layers or its layer's.
"""

from __future__ import annotations

import dataclasses

from ..finetune.selection import unit_sizes
from .options import ClaimOptions


@dataclasses.dataclass(frozen=True)
class ClaimUnits:
    """The units of one claim, in the claim's order: ``names``, each one's ``component`` and ``layer``
    index (None for a whole component)."""

    names: tuple[str, ...]
    components: tuple[str, ...]
    layers: tuple[int | None, ...]

    @classmethod
    def of(cls, names, units=None) -> ClaimUnits:
        """A plan's units: its (component, layer) ``units``, or without them whole components ``names``."""
        return cls.whole(names) if units is None else cls.per_layer(units)

    @classmethod
    def whole(cls, components) -> ClaimUnits:
        """Whole components (a component claim)."""
        return cls(tuple(components), tuple(components), (None,) * len(components))

    @classmethod
    def per_layer(cls, units) -> ClaimUnits:
        """(component, layer index) units (a layer claim)."""
        return cls(tuple(map(unit_name, units)), tuple(c for c, _ in units), tuple(li for _, li in units))

    @property
    def granularity(self) -> str:
        return "component" if all(li is None for li in self.layers) else "layer"

    @property
    def noun(self) -> str:
        """What the report calls a unit: ``component`` or ``unit``."""
        return "component" if self.granularity == "component" else "unit"

    @property
    def budget_unit(self) -> str:
        """What a budget counts: ``components``, or ``parameters`` besides the head."""
        return "components" if self.granularity == "component" else "parameters"

    def __len__(self) -> int:
        return len(self.names)


def unit_name(unit: tuple[str, int]) -> str:
    return f"{unit[0]}@{unit[1]}"


def units_of(measured: dict, components: list[str]) -> list[tuple[str, int]]:
    """``(component, layer index)`` of every measured unit of ``components``, component-major."""
    missing = [c for c in components if c not in measured["components"]]
    if missing:
        raise ValueError(f"components {missing} were not measured (measured: {measured['components']})")
    return [(c, li) for c in components for li in range(len(measured["layers"]))]


def layer_units(opts: ClaimOptions, measured: dict, net) -> tuple[list, dict[str, int], list[str]]:
    """``(units, sizes, names)``: the units of ``--components`` in ``measured`` (a layer claim's
    plasticity chunks), each unit's trainable-parameter count by name (read from ``net``, the
    dataset's model) and the units' names (as ``vitplast finetune --train`` values)."""
    sizes = unit_sizes(net)
    units = units_of(measured, opts.components)
    names = [unit_name(u) for u in units]
    missing = [n for n, u in zip(names, units, strict=True) if u not in sizes]
    if missing:
        raise ValueError(f"the component map of {opts.model} has no {missing[0]}")
    return units, {n: sizes[u] for n, u in zip(names, units, strict=True)}, names
