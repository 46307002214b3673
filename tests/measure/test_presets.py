"""Component presets: glob semantics, auto-detection, and measurements on HF transformers models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vitplast_kernels as vk
from vitplast_kernels.measure import presets

COMPS = ("LN1", "MHA", "LN2", "FC1", "FC2")


def test_glob_semantics():
    names = ["blocks.0.attn", "blocks.10.attn", "blocks.2.attn.proj", "m._orig_mod.blocks.3.attn",
             "blocks.x.attn"]
    assert presets.match("blocks.*.attn", names) == {
        ("0",): "blocks.0.attn", ("10",): "blocks.10.attn", ("x",): "blocks.x.attn"}
    found = presets.match("**.blocks.*.attn", names[1:])
    assert found[("3",)] == "m._orig_mod.blocks.3.attn" and ("2",) not in found
    assert presets.match("blocks.1.attn", names) == {}  # no prefix match: blocks.10 is not blocks.1
    with pytest.raises(ValueError, match="same layer"):
        presets.match("**.attn", ["a.attn", "b.attn"])
    with pytest.raises(ValueError, match="must end with a module name"):
        presets.match("blocks.**", names)
    keys = [("10",), ("2",), ("0",)]
    assert sorted(keys, key=presets.layer_sort_key) == [("0",), ("2",), ("10",)]


def _skeleton(names: list[str]) -> nn.Module:
    """A module tree holding exactly ``names`` (Identity leaves)."""
    root = nn.Module()
    for name in names:
        parent = root
        for part in name.split("."):
            if not hasattr(parent, part):
                parent.add_module(part, nn.Identity())
            parent = getattr(parent, part)
    return root


@pytest.mark.parametrize(
    "preset,names",
    [
        ("timm-vit", ["blocks.0.norm1", "blocks.0.attn", "blocks.0.norm2", "blocks.0.mlp.fc1",
                      "blocks.0.mlp.fc2"]),
        ("timm-swiglu", ["blocks.0.norm1", "blocks.0.attn", "blocks.0.norm2", "blocks.0.mlp.fc1_g",
                         "blocks.0.mlp.fc1_x", "blocks.0.mlp.fc2"]),
        ("dinov2-swiglu-w12", ["backbone.blocks.0.norm1", "backbone.blocks.0.attn", "backbone.blocks.0.norm2",
                               "backbone.blocks.0.mlp.w12", "backbone.blocks.0.mlp.w3"]),
        ("hf-vit", ["vit.encoder.layer.0.layernorm_before", "vit.encoder.layer.0.attention",
                    "vit.encoder.layer.0.layernorm_after", "vit.encoder.layer.0.intermediate.dense",
                    "vit.encoder.layer.0.output.dense"]),
        ("hf-bert", ["encoder.layer.0.attention.output.LayerNorm", "encoder.layer.0.attention.output.dense",
                     "encoder.layer.0.intermediate.dense", "encoder.layer.0.output.dense",
                     "encoder.layer.0.output.LayerNorm"]),
        ("hf-gpt2", ["transformer.h.0.ln_1", "transformer.h.0.attn", "transformer.h.0.ln_2",
                     "transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj"]),
    ],
)
def test_detect(preset, names):
    model = _skeleton(names + [n.replace(".0.", ".1.", 1) for n in names])
    p = presets.detect(model)
    assert p.name == preset
    layers, mods = presets.resolve(model, p.components)
    assert layers == [("0",), ("1",)] and set(mods) == set(COMPS)


def test_detect_nothing():
    with pytest.raises(ValueError, match="no component found.*components="):
        presets.detect(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)))


def test_swiglu_parts_must_agree():
    model = _skeleton(["blocks.0.a", "blocks.0.b", "blocks.1.a"])
    with pytest.raises(ValueError, match=r"part 'blocks.\*.b' matches layers"):
        presets.resolve(model, {"FC1": ("blocks.*.a", "blocks.*.b")})


transformers = pytest.importorskip("transformers")


def _measure(model, inputs, **kw):
    out = {}
    for protocol in ("in_situ", "decomposition"):
        with vk.capture(model, protocol=protocol, **kw) as acts, torch.no_grad():
            model(**inputs)
        out[protocol] = vk.pairwise_plasticity(acts, strict=True)
    return acts, out


def test_hf_bert_post_norm(gen):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     vocab_size=100, hidden_act="gelu")
    model = BertModel(cfg).eval()
    ids = torch.randint(0, 100, (4, 9), generator=gen)
    acts, res = _measure(model, {"input_ids": ids}, per_head=True)
    assert acts.preset == "hf-bert"
    for r in res.values():
        assert r.components == COMPS and r.n_layers == 2
        assert all((r.n_pairs(c) == 2).all() for c in COMPS)
    # in situ FC2 = output.dense on the intermediate activation; LN2 = output.LayerNorm
    store = {}
    layer = model.encoder.layer[1]
    h = layer.output.dense.register_forward_hook(lambda m, a, o: store.update(i=a[0], o=o))
    with torch.no_grad():
        model(input_ids=ids)
    h.remove()
    i, o = store["i"].double(), store["o"].double()
    ref = ((o[:2] - o[2:]).pow(2).sum((1, 2)) / (i[:2] - i[2:]).pow(2).sum((1, 2))).sqrt().mean()
    assert torch.allclose(res["in_situ"].mean("FC2")[1], ref, rtol=2e-5)
    assert res["in_situ"].head_mean().shape == (2, 2)


def test_hf_gpt2_and_vit(gen):
    from transformers import GPT2Config, GPT2Model, ViTConfig, ViTModel

    torch.manual_seed(0)
    gpt = GPT2Model(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, bos_token_id=0,
                               eos_token_id=0)).eval()
    acts, res = _measure(gpt, {"input_ids": torch.randint(0, 100, (4, 6), generator=gen)})
    assert acts.preset == "hf-gpt2" and all(torch.isfinite(res["decomposition"].mean(c)).all() for c in COMPS)
    vit = ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             image_size=32, patch_size=8)).eval()
    acts, res = _measure(vit, {"pixel_values": torch.randn(4, 3, 32, 32, generator=gen)}, per_head=True)
    assert acts.preset in ("hf-vit", "hf-vit-layers") and res["in_situ"].components == COMPS
