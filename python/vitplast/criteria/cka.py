"""``cka``: how much a unit changes its input's representation, 1 - linear CKA of input and output."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from .base import Cost, Criterion, Setting, Units, unit_grid


def centred_gram(features: torch.Tensor) -> torch.Tensor:
    """``(n, n)`` float64 Gram matrix ``X̃ X̃ᵀ`` of the column-centred ``(n, ...)`` features."""
    x = features.detach().flatten(1).to(torch.float64)
    x = x - x.mean(0, keepdim=True)
    return x @ x.T


def linear_cka(gram_x: torch.Tensor, gram_y: torch.Tensor) -> float:
    """Linear CKA from two centred Gram matrices: ``HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))`` with the
    biased ``HSIC(K, L) = tr(K L) / (n - 1)²`` (the ``(n - 1)²`` cancels). NaN when a Gram is 0."""
    kl = float((gram_x * gram_y).sum())
    kk, ll = float((gram_x * gram_x).sum()), float((gram_y * gram_y).sum())
    return kl / float(np.sqrt(kk * ll)) if kk > 0 and ll > 0 else float("nan")


class CKA(Criterion):
    """``1 - CKA(X, Y)``: X the unit's input, Y its output, on the downstream images.

    Samples are images, features the flattened token x channel activation. Linear CKA with the biased
    HSIC estimator on centred Gram matrices (Kornblith, Norouzi, Lee & Hinton, *Similarity of neural
    network representations revisited*, ICML 2019): ``CKA = ‖Ỹᵀ X̃‖²_F / (‖X̃ᵀ X̃‖_F ‖Ỹᵀ Ỹ‖_F)``,
    computed from the ``n x n`` Grams. A unit that rewrites its input more scores higher. Computed on
    each criterion batch (``n`` = the batch's images) and averaged over the batches; forward only, one
    pass per batch. A unit of several modules: the first module's input, the last one's output.
    """

    name = "cka"
    value_range = (-1e-9, 1 + 1e-9)  # 1 - CKA, CKA in [0, 1] (to rounding)
    needs = frozenset({"images"})

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        named = dict(net.named_modules())
        grams: dict = {}
        totals, n_batches = {u: 0.0 for u in units.modules}, 0
        with contextlib.ExitStack() as undo, torch.no_grad():  # undo: the hooks removed, the mode restored
            for unit, mods in units.modules.items():
                def first(module, args, unit=unit):
                    grams.setdefault(unit, {})["x"] = centred_gram(args[0])

                def last(module, args, out, unit=unit):
                    grams.setdefault(unit, {})["y"] = centred_gram(out[0] if isinstance(out, tuple) else out)

                undo.callback(named[mods[0]].register_forward_pre_hook(first).remove)
                undo.callback(named[mods[-1]].register_forward_hook(last).remove)
            undo.callback(net.train, net.training)
            net.eval()
            for batch in setting.batches:
                grams.clear()
                with setting.autocast():
                    net(batch.images.to(setting.device))
                cost.forwards += 1
                n_batches += 1
                for u in units.modules:
                    totals[u] += 1.0 - linear_cka(grams[u]["x"], grams[u]["y"])
        if n_batches == 0:
            raise ValueError("cka: no criterion batch to measure (--criterion-batches)")
        return unit_grid(units, {u: total / n_batches for u, total in totals.items()}), {}
