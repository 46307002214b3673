"""``size``: a unit's parameter count."""

from __future__ import annotations

import math

from .base import Cost, Criterion, Setting, Units, unit_grid


class Size(Criterion):
    """The number of parameters of the unit: ``size(u) = Σ_{θ ∈ u} numel(θ)``.

    A component's score is the **sum** over its layers (its trainable parameters when it is finetuned
    alone). Reads only the weights. The rival a plasticity claim must beat first: bigger parts, more
    capacity (the claim's trainable-parameter comparison).
    """

    name = "size"
    needs = frozenset({"weights"})
    layer_reduce = "sum"
    value_range, whole_values = (0.0, math.inf), True

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        return unit_grid(units, {u: float(sum(p.numel() for p in units.parameters(net, u).values()))
                                 for u in units.modules}), {}
