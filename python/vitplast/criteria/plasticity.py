"""``plasticity``: the package's own criterion, the mean pair rate of each unit."""

from __future__ import annotations

import numpy as np

from .base import Criterion, Setting, Units, unit_grid
from .cost import Cost
from .loop import measure_plasticity


class Plasticity(Criterion):
    """``P(u) = mean over distinct pairs (x, y) of ‖u(x) − u(y)‖_F / ‖x − y‖_F`` (DESIGN.md), with
    either protocol: ``in_situ`` (each unit sees its real input) or ``decomposition`` (every unit
    applied to the embedding output, the paper's). Pairs from the setting's ``pair_batches``
    (``halves`` or ``all``), measured through the one measuring loop
    (`vitplast.criteria.loop.measure_plasticity`). Odonnat, Chapel, Tavenard & Redko, *Vision
    Transformer Finetuning Benefits from Non-Smooth Components*, 2026. Forward only. Extra value:
    ``pairs`` (pairs used per unit).
    """

    name = "plasticity"
    needs = frozenset({"images", "pairs"})

    def options(self, setting: Setting) -> dict:
        o = setting.options
        return {"protocol": o.get("protocol", "in_situ"), "pairs": o.get("pairs", "halves"),
                "embedding": o.get("embedding")}

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        if setting.pair_batches is None:
            raise ValueError("plasticity: the setting has no paired images (pair_batches)")
        o = self.options(setting)
        measured = measure_plasticity(net.eval(), setting.pair_batches(), amp=setting.amp,
                                      limit=setting.options.get("limit"), protocol=o["protocol"],
                                      pairs=o["pairs"], components=setting.components,
                                      embedding=o["embedding"], progress=setting.progress)
        cost.forwards += measured.steps
        res = measured.result
        if res is None:
            raise ValueError("plasticity: no batch was measured")
        values, pairs = unit_grid(units), unit_grid(units)
        for i, c in enumerate(units.components):
            values[i] = res.mean(c).numpy()
            pairs[i] = res.n_pairs(c).numpy().astype(np.float64)
        return values, {"pairs": pairs}
