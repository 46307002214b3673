"""``fisher``: the empirical Fisher information of a unit's parameters, per parameter."""

from __future__ import annotations

import contextlib
import math

import torch.nn.functional as F

from .base import Criterion, Setting, Units, unit_grid
from .cost import Cost
from .loss import gradients_only_for, logits

# samples per vmap call: bounds the per-sample gradients held at once (samples x unit parameters)
CHUNK = 16


class Fisher(Criterion):
    """The empirical Fisher information per parameter of the unit:

    ``F(u) = (1 / |u|) · (1 / n) Σ_i Σ_{θ ∈ u} (∂ℓ_i / ∂θ)²``, ``ℓ_i`` the cross-entropy of sample ``i``
    of the criterion's batches (labelled downstream images), ``|u|`` the unit's parameter count (so the
    score does not just follow size); the sum over parameters (``F(u) · |u|``) is reported beside it as
    the extra value ``sum``. Per-sample gradients with ``torch.func`` (``vmap`` over ``grad`` of a
    ``functional_call`` on one sample), one unit at a time and `CHUNK` samples per call, so that
    only one unit's per-sample gradients exist at once (ViT-B fits). At the pretrained weights, the head
    initialised as the finetuning run of the seed initialises it, eval mode; per seed, the score the
    mean over seeds. (Kirkpatrick et al., *Overcoming catastrophic forgetting in neural networks*, PNAS
    2017, for the empirical Fisher as a parameter importance.) Passes counted per unit and batch.
    """

    name = "fisher"
    needs = frozenset({"images", "labels", "backward"})
    per_seed = True

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        from torch.func import functional_call, grad, vmap
        from torch.nn.attention import SDPBackend, sdpa_kernel

        values, sums = unit_grid(units), unit_grid(units)
        amp = setting.amp or contextlib.nullcontext

        def sample_loss(params, x, y):
            with amp():
                out = logits(functional_call(net, params, (x.unsqueeze(0),)))
            return F.cross_entropy(out.float(), y.unsqueeze(0))

        per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))
        # the math attention: vmap has batching rules for its ops, not for the fused CPU kernel's
        with gradients_only_for(net, set()), sdpa_kernel([SDPBackend.MATH]):
            for (c, li) in units.modules:
                params = {n: p.detach() for n, p in units.parameters(net, (c, li)).items()}
                size = sum(p.numel() for p in params.values())
                total, n = 0.0, 0
                for batch in setting.batches:
                    x, y = batch.images.to(setting.device), batch.labels.to(setting.device)
                    for k in range(0, x.shape[0], CHUNK):
                        grads = per_sample(params, x[k:k + CHUNK], y[k:k + CHUNK])
                        sq = sum(g.double().pow(2).flatten(1).sum(1) for g in grads.values())
                        total += float(sq.sum())
                        n += int(x[k:k + CHUNK].shape[0])
                    cost.forwards += 1
                    cost.backwards += 1
                if n == 0:
                    raise ValueError("fisher: no labelled criterion batch (--criterion-batches)")
                i = units.components.index(c)
                sums[i, li] = total / n
                values[i, li] = total / n / size if size else math.nan
        return values, {"sum": sums}


