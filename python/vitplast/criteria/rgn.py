"""``rgn``: the relative gradient norm of a unit."""

from __future__ import annotations

import math

from .base import Cost, Setting, Units, unit_grid
from .loss import LossCriterion, cross_entropy_backwards, gradients_only_for


def _norm(tensors) -> float:
    return math.sqrt(sum(float(t.detach().double().pow(2).sum()) for t in tensors))


class RGN(LossCriterion):
    """``RGN(u) = ‖g_u‖₂ / ‖θ_u‖₂``: ``θ_u`` the concatenation of the unit's parameter tensors, ``g_u``
    the gradient at the pretrained weights of the mean cross-entropy over the criterion's batches
    (``--criterion-batches``, labelled downstream training images), the head initialised as the
    finetuning run of the seed initialises it; computed per seed, the score the mean over seeds.

    Auto-RGN (Lee, Chen, Tajwar, Kumar, Yao, Liang & Finn, *Surgical Fine-Tuning Improves Adaptation to
    Distribution Shifts*, ICLR 2023) computes it per parameter tensor; here the tensors of a unit are
    pooled. Gradients are accumulated in float32 (the parameters' dtype), the norms in float64; the
    model runs in eval mode (no dropout). One forward and one backward pass per batch and seed.
    """

    name = "rgn"

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        params = {u: units.parameters(net, u) for u in units.modules}
        with gradients_only_for(net, {n for p in params.values() for n in p}):
            cross_entropy_backwards(net, setting, cost, self.name, mean=True)
            norms = {u: (_norm(p.grad for p in ps.values() if p.grad is not None), _norm(ps.values()))
                     for u, ps in params.items()}
        return unit_grid(units, {u: g / w if w > 0 else math.nan for u, (g, w) in norms.items()}), {}
