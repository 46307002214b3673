"""What a layer-granularity claim ranks and trains: every (component, layer) unit of ``--components``
that its measurement holds, each unit's trainable-parameter count and its name (``MHA@3``)."""

from __future__ import annotations

from ..finetune import unit_sizes
from .layers import unit_name, units_of
from .options import ClaimOptions


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
