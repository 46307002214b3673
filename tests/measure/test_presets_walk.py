"""Every tiny/small/base timm ``vit_*``, ``deit*`` and ``eva*`` model is measured with the preset
detection: all five components found and every per-layer mean finite (random weights, 64x64 input).

To keep the walk to about a minute on two cores, each model is built with 2 blocks, width 64 and
4 heads when its constructor takes that (falling back to the full width, then the full depth), and
the hybrid ViTs keep their full ResNet stems. ``VITPLAST_PRESET_WALK=tiny,small`` restricts the walk
to those sizes.
"""

from __future__ import annotations

import os
import re
import warnings

import pytest
import torch

import vitplast_kernels as vk

timm = pytest.importorskip("timm")

COMPS = ("LN1", "MHA", "LN2", "FC1", "FC2")
SIZES = tuple(s for s in os.environ.get("VITPLAST_PRESET_WALK", "tiny,small,base").split(",") if s)
SMALL = dict(depth=2, embed_dim=64, num_heads=4)
# constructor arguments tied to the depth or the head count
OVERRIDES = {"vit_base_patch16_sapiens2": dict(SMALL, num_kv_heads=(4, 4))}
# models whose blocks have no module per component (the test checks that detection says so)
NO_PRESET = {
    "vit_base_patch16_xp_224": "ParallelScalingBlock (ViT-22B style): one norm feeds a fused "
    "qkv+fc1 projection and attention is computed inline in the block, so no module is the attention",
}


def _names() -> list[str]:
    names = set(timm.list_models("vit_*")) | set(timm.list_models("deit*")) | set(timm.list_models("eva*"))
    rx = re.compile(rf"(^|_)({'|'.join(SIZES)})(_|\d|$)")
    return sorted(n for n in names if rx.search(n))


def _build(name: str) -> torch.nn.Module:
    tries = [OVERRIDES[name]] if name in OVERRIDES else [SMALL, dict(embed_dim=64, num_heads=4),
                                                         dict(depth=2), {}]
    err: Exception | None = None
    for kw in tries:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return timm.create_model(name, pretrained=False, num_classes=3, img_size=64, **kw).eval()
        except Exception as exc:  # a size argument this family does not take: try the next
            err = exc
    raise AssertionError(f"{name}: cannot be built at img 64: {err}")


# `make test-fast` walks this sample (plain ViT, DeiT with distillation token, EVA-02, a hybrid);
# `make test` walks every name
FAST = ("vit_tiny_patch16_224", "deit_tiny_distilled_patch16_224", "eva02_tiny_patch14_224",
        "vit_tiny_r_s16_p8_224")


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in _names()])
def test_every_vit_family_model_has_five_finite_components(name, gen):
    model = _build(name)
    if name in NO_PRESET:
        with pytest.raises(ValueError, match="no component found"):
            vk.capture(model)
        pytest.xfail(NO_PRESET[name])
    with vk.capture(model) as acts, torch.no_grad():
        model(torch.randn(4, 3, 64, 64, generator=gen))
    res = vk.pairwise_plasticity(acts, strict=True)
    assert res.components == COMPS, f"{name}: {acts.preset} found {res.components}"
    for c in COMPS:
        m = res.mean(c)
        assert torch.isfinite(m).all(), f"{name} ({acts.preset}): {c} = {m.tolist()}"
        assert (res.n_pairs(c) == 2).all()
