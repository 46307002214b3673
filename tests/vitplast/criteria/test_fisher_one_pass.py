"""Fisher from one forward and backward per batch gives the values of its former definition: a ``vmap``
over per-sample ``grad``s of the whole model (kept here, and only here, as the reference)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from vitplast.criteria import Batch, Cost, Setting, get_criterion
from vitplast.criteria.base import Units, resolve_units, unit_grid
from vitplast.criteria.fisher import Fisher
from vitplast.criteria.loss import gradients_only_for, logits

TOL = 1e-6  # the largest relative difference allowed against the reference


def vmap_fisher(net, units, batches, chunk: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """The criterion's former implementation (values, sums): per-sample gradients of every unit's
    parameters with ``vmap(grad(...))`` of a ``functional_call`` on one sample, ``chunk`` samples per
    call, the squares summed in float64 per unit and over samples."""
    from torch.func import functional_call, grad, vmap
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sample_loss(params, x, y):
        out = logits(functional_call(net, params, (x.unsqueeze(0),)))
        return F.cross_entropy(out.float(), y.unsqueeze(0))

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))
    params = {n: p.detach() for u in units.modules for n, p in units.parameters(net, u).items()}
    owner = {n: u for u in units.modules for n in units.parameters(net, u)}
    total, n = dict.fromkeys(units.modules, 0.0), 0
    with gradients_only_for(net, set()), sdpa_kernel([SDPBackend.MATH]):
        for b in batches:
            for k in range(0, b.images.shape[0], chunk):
                grads = per_sample(params, b.images[k:k + chunk], b.labels[k:k + chunk])
                for name, g in grads.items():
                    total[owner[name]] += float(g.double().pow(2).flatten(1).sum(1).sum())
                n += int(b.images[k:k + chunk].shape[0])
    values, sums = unit_grid(units), unit_grid(units)
    for (c, li), t in total.items():
        size = sum(p.numel() for p in units.parameters(net, (c, li)).values())
        i = units.components.index(c)
        sums[i, li] = t / n
        values[i, li] = t / n / size if size else math.nan
    return values, sums


def _batches(shape, classes, sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Batch(torch.randn(s, *shape, generator=g), torch.randint(0, classes, (s,), generator=g))
            for s in sizes]


def _compare(net, batches, components=None):
    setting = Setting(lambda seed: net, seeds=(0,), batches=batches, components=components)
    res = get_criterion("fisher").score(setting)
    units = resolve_units(net, components)
    want, want_sums = vmap_fisher(net, units, batches)
    defined = ~np.isnan(want)
    assert np.array_equal(defined, ~np.isnan(res.values))
    rel = np.abs(res.values[defined] - want[defined]) / np.abs(want[defined])
    rel_sums = np.abs(res.extra["sum"][defined] - want_sums[defined]) / np.abs(want_sums[defined])
    assert (want[defined] > 0).all()
    assert rel.max() <= TOL, f"max relative difference {rel.max():.3g}"
    assert rel_sums.max() <= TOL, f"max relative difference of the sums {rel_sums.max():.3g}"
    assert res.cost.forwards == res.cost.backwards == len(batches)  # one pass per batch
    return rel.max()


def test_fisher_matches_the_vmap_definition_on_the_digits_vit():
    from vitplast.models.digits import build_digits_vit, shipped_checkpoint

    torch.manual_seed(0)
    net = build_digits_vit(weights=shipped_checkpoint(), num_classes=5).eval()
    _compare(net, _batches((3, 32, 32), 5, [8, 5]))


@pytest.mark.slow
def test_fisher_matches_the_vmap_definition_on_a_random_vit_tiny():
    torch.manual_seed(0)
    net = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10).eval()
    _compare(net, _batches((3, 224, 224), 10, [4, 3]))


def test_fisher_general_path_matches_on_layer_scale_and_attention_biases():
    """Units holding parameters of modules other than Linear and LayerNorm (timm's LayerScale ``gamma``),
    made through the per-module vmap, and a component map of the user's."""
    torch.manual_seed(3)
    net = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=4, embed_dim=16,
                            depth=2, num_heads=2, num_classes=3, init_values=0.5).eval()
    components = {"LN1": "blocks.*.norm1", "MHA": "blocks.*.attn", "LS1": "blocks.*.ls1",
                  "FC1": "blocks.*.mlp.fc1", "LS2": "blocks.*.ls2"}
    _compare(net, _batches((3, 16, 16), 3, [6, 6]), components)


def test_a_module_called_twice_sums_its_calls_before_squaring():
    """A Linear applied twice in one forward: its per-sample gradient is the sum over both calls."""

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(6)
            self.fc = torch.nn.Linear(6, 6)
            self.head = torch.nn.Linear(6, 3)

        def forward(self, x):
            h = self.fc(torch.tanh(self.fc(self.norm(x))))
            return self.head(h.mean(1))

    torch.manual_seed(0)
    net = Twice().eval()
    batches = _batches((5, 6), 3, [4, 4])
    units = Units(("LN", "FC"), ("0",), {("LN", 0): ("norm",), ("FC", 0): ("fc",)})
    setting = Setting(lambda seed: net, batches=batches)
    values, extra = Fisher().score_units(net, units, setting, Cost())
    want, want_sums = vmap_fisher(net, units, batches)
    np.testing.assert_allclose(values, want, rtol=TOL)
    np.testing.assert_allclose(extra["sum"], want_sums, rtol=TOL)
