"""``fisher``: the empirical Fisher information of a unit's parameters, per parameter."""

from __future__ import annotations

import contextlib
import math

import torch.nn.functional as F

from .base import Criterion, Setting, Units, unit_grid
from .cost import Cost
from .loss import gradients_only_for, logits

# samples per vmap call, and the per-sample gradient values held at once (samples x parameters of the
# units differentiated together: 2**26 float32 values = 256 MiB); units are grouped up to that bound
CHUNK = 16
MAX_VALUES = 2**26


class Fisher(Criterion):
    """The empirical Fisher information per parameter of the unit:

    ``F(u) = (1 / |u|) · (1 / n) Σ_i Σ_{θ ∈ u} (∂ℓ_i / ∂θ)²``, ``ℓ_i`` the cross-entropy of sample ``i``
    of the criterion's batches (labelled downstream images), ``|u|`` the unit's parameter count (so the
    score does not just follow size); the sum over parameters (``F(u) · |u|``) is reported beside it as
    the extra value ``sum``. Per-sample gradients with ``torch.func`` (``vmap`` over ``grad`` of a
    ``functional_call`` on one sample), `CHUNK` samples per call, units grouped so that at most
    `MAX_VALUES` per-sample gradient values exist at once (a unit larger than that alone: ViT-B fits).
    At the pretrained weights, the head
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
            for group in _groups(net, units):
                params = {n: p.detach() for u in group for n, p in units.parameters(net, u).items()}
                owner = {n: u for u in group for n in units.parameters(net, u)}
                total, n = {u: 0.0 for u in group}, 0
                for batch in setting.batches:
                    x, y = batch.images.to(setting.device), batch.labels.to(setting.device)
                    for k in range(0, x.shape[0], CHUNK):
                        grads = per_sample(params, x[k:k + CHUNK], y[k:k + CHUNK])
                        for u in group:
                            sq = sum(g.double().pow(2).flatten(1).sum(1) for name, g in grads.items()
                                     if owner[name] == u)
                            total[u] += float(sq.sum())
                        n += int(x[k:k + CHUNK].shape[0])
                    cost.forwards += 1
                    cost.backwards += 1
                if n == 0:
                    raise ValueError("fisher: no labelled criterion batch (--criterion-batches)")
                for (c, li) in group:
                    size = sum(p.numel() for p in units.parameters(net, (c, li)).values())
                    i = units.components.index(c)
                    sums[i, li] = total[(c, li)] / n
                    values[i, li] = total[(c, li)] / n / size if size else math.nan
        return values, {"sum": sums}




def _groups(net, units: Units) -> list[list[tuple[str, int]]]:
    """The units in order, grouped so that `CHUNK` samples' gradients of a group hold at most
    `MAX_VALUES` values (a unit larger than that alone)."""
    groups, current, held = [], [], 0
    for u in units.modules:
        size = CHUNK * sum(p.numel() for p in units.parameters(net, u).values())
        if current and held + size > MAX_VALUES:
            groups.append(current)
            current, held = [], 0
        current.append(u)
        held += size
    if current:
        groups.append(current)
    return groups
