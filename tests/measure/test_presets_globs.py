"""Glob segments with ``?`` and ``[...]`` (as in fnmatch), pattern errors, and the presets of timm's
hybrid (ResNet stem) and parallel-block ViTs."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import vitplast_kernels as vk
from vitplast_kernels.measure import presets

NAMES = ["blocks.0.attn", "blocks.2.attn", "blocks.10.attn", "blocks.12.attn", "blocks.x.attn",
         "blocks.].attn", "m.blocks.3.attn", "blocks.1.attn.proj"]


@pytest.mark.parametrize("pattern,layers", [
    ("blocks.1?.attn", ["10", "12"]),           # the whole segment is the layer
    ("blocks.[0-2].attn", ["0", "2"]),
    ("blocks.[!0-9].attn", ["x", "]"]),
    ("blocks.[]x].attn", ["x", "]"]),           # ']' first in a set is a member
    ("blocks.?.attn", ["0", "2", "x", "]"]),
    ("**.blocks.[3].attn", ["3"]),
    ("blocks.*.attn", ["0", "2", "10", "12", "x", "]"]),
])
def test_question_mark_and_sets(pattern, layers):
    found = presets.match(pattern, NAMES)
    assert sorted(k[-1] for k in found) == sorted(layers)
    assert "blocks.1.attn.proj" not in found.values()


def test_every_wildcard_segment_is_a_part_of_the_layer():
    assert presets.match("bl?cks.*.attn", ["blocks.0.attn"]) == {("blocks", "0"): "blocks.0.attn"}
    assert presets.match("stages.*.blocks.[0-9]*.attn", ["stages.1.blocks.12.attn"]) == {
        ("1", "12"): "stages.1.blocks.12.attn"}


def test_wildcards_never_cross_a_dot():
    assert presets.match("a.?.c", ["a.b.c", "a..c", "a.bb.c"]) == {("b",): "a.b.c"}
    assert presets.match("a.[!x]b", ["a.yb", "a..b", "a.xb"]) == {("yb",): "a.yb"}


@pytest.mark.parametrize("bad,needle", [
    ("blocks..attn", "empty segment"),
    ("blocks.[0-2.attn", "closing"),
    ("a**b.c", "whole segment"),
    ("blocks.**", "must end with a module name"),
    ("", "non-empty"),
])
def test_bad_patterns_are_named(bad, needle):
    with pytest.raises(ValueError, match=needle):
        presets.check_pattern(bad)


def _skeleton(names: list[str]) -> nn.Module:
    root = nn.Module()
    for name in names:
        parent = root
        for part in name.split("."):
            if not hasattr(parent, part):
                parent.add_module(part, nn.Identity())
            parent = getattr(parent, part)
    return root


def test_hybrid_stem_blocks_do_not_collide():
    """A ResNet stem's own ``blocks.N.norm1`` sits beside the transformer's: the preset is taken at the
    one prefix where every component exists."""
    vit = [f"blocks.{i}.{m}" for i in (0, 1) for m in ("norm1", "attn", "norm2", "mlp.fc1", "mlp.fc2")]
    stem = [f"patch_embed.backbone.stages.0.blocks.{i}.{m}" for i in (0, 1) for m in ("norm1", "conv1")]
    p = presets.detect(_skeleton(stem + vit))
    assert p.name == "timm-vit" and p.components["LN1"] == "blocks.*.norm1"
    assert p.embedding == "blocks.0:input"
    wrapped = presets.detect(_skeleton(["model." + n for n in stem + vit]))
    assert wrapped.components["MHA"] == "model.blocks.*.attn"


def test_two_transformers_are_ambiguous():
    vit = [f"blocks.0.{m}" for m in ("norm1", "attn", "norm2", "mlp.fc1", "mlp.fc2")]
    with pytest.raises(ValueError, match="several transformers.*'student.', 'teacher.'"):
        presets.detect(_skeleton([p + n for p in ("teacher.", "student.") for n in vit]))


@pytest.mark.slow
def test_timm_hybrid_and_parallel_models(gen):
    timm = pytest.importorskip("timm")
    cases = (("vit_small_r26_s32_224", "timm-vit", ("0", "1")),
             ("vit_small_patch16_18x2_224", "timm-parallel", ("0.0", "0.1", "1.0", "1.1")))
    for name, preset, layers in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = timm.create_model(name, num_classes=3, img_size=64, depth=2, embed_dim=64,
                                      num_heads=4).eval()
        x = torch.randn(4, 3, 64, 64, generator=gen)
        for protocol in ("in_situ", "decomposition"):
            with vk.capture(model, protocol=protocol, per_head=True) as acts, torch.no_grad():
                model(x)
            res = vk.pairwise_plasticity(acts, strict=True)
            assert acts.preset == preset and res.layers == layers, (name, res.layers)
            assert all(torch.isfinite(res.mean(c)).all() for c in res.components)
    # a parallel layer 'b.k' is branch k of block b: LN1 is attns.k.norm, FC2 ffns.k.mlp.fc2
    assert acts.modules["LN1"][("1", "0")] == ("blocks.1.attns.0.norm",)
    assert acts.modules["FC2"][("0", "1")] == ("blocks.0.ffns.1.mlp.fc2",)

