"""``rgn``: the relative gradient norm of a unit."""

from __future__ import annotations

import contextlib
import math

import torch.nn.functional as F

from .base import Criterion, Setting, Units, unit_grid
from .cost import Cost
from .loss import gradients_only_for, logits


class RGN(Criterion):
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
    value_range = (0.0, math.inf)
    needs = frozenset({"images", "labels", "backward"})
    per_seed = True

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        params = {u: units.parameters(net, u) for u in units.modules}
        names = {n for p in params.values() for n in p}
        total = sum(int(b.images.shape[0]) for b in setting.batches)
        if total == 0:
            raise ValueError("rgn: no labelled criterion batch (--criterion-batches)")
        with gradients_only_for(net, names):
            for batch in setting.batches:
                with setting.amp() if setting.amp else contextlib.nullcontext():
                    out = logits(net(batch.images.to(setting.device)))
                loss = F.cross_entropy(out.float(), batch.labels.to(setting.device), reduction="sum") / total
                loss.backward()
                cost.forwards += 1
                cost.backwards += 1
            values = unit_grid(units)
            for (c, li), ps in params.items():
                g = math.sqrt(sum(float(p.grad.detach().double().pow(2).sum()) for p in ps.values()
                                  if p.grad is not None))
                w = math.sqrt(sum(float(p.detach().double().pow(2).sum()) for p in ps.values()))
                values[units.components.index(c), li] = g / w if w > 0 else math.nan
        return values, {}


