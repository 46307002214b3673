"""Parameter selection of `vitplast finetune --train ...`: each choice trains exactly what it says.

The expected sets are written independently of vitplast.finetune.selection, from timm's parameter names.
"""

from __future__ import annotations

import re
import sys
import warnings

import pytest
import torch
from vitplast.finetune import auto, lora
from vitplast.finetune import selection as T

DEPTH = 3


@pytest.fixture(scope="module")
def vit():
    import timm

    return timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, img_size=16,
                             patch_size=8, depth=DEPTH, embed_dim=32, num_heads=2)


# component -> regex over timm ViT parameter names
EXPECTED = {
    "MHA": r"blocks\.\d+\.attn\.",
    "FC1": r"blocks\.\d+\.mlp\.fc1\.",
    "FC2": r"blocks\.\d+\.mlp\.fc2\.",
    "LN1": r"blocks\.\d+\.norm1\.",
    "LN2": r"blocks\.\d+\.norm2\.",
}
HEAD = r"head\."


def _trainable(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


def _matching(model, *patterns):
    return {n for n, _ in model.named_parameters() if any(re.match(p, n) for p in patterns)}


@pytest.mark.parametrize("component", list(EXPECTED))
def test_component_in_every_block_plus_head(vit, component):
    names = T.select_trainable(vit, component)
    expected = _matching(vit, EXPECTED[component], HEAD)
    assert _trainable(vit) == expected == set(names)
    blocks_hit = {int(n.split(".")[1]) for n in expected if n.startswith("blocks.")}
    assert blocks_hit == set(range(DEPTH))
    assert all(p.requires_grad == (n in expected) for n, p in vit.named_parameters())


def test_head_full_and_combination(vit):
    T.select_trainable(vit, "head")
    assert _trainable(vit) == _matching(vit, HEAD)
    T.select_trainable(vit, "full")
    assert _trainable(vit) == {n for n, _ in vit.named_parameters()}
    T.select_trainable(vit, "mha+fc2")  # case-insensitive, + joins components
    assert _trainable(vit) == _matching(vit, EXPECTED["MHA"], EXPECTED["FC2"], HEAD)


def test_groups_partition_all_parameters(vit):
    groups = T.parameter_groups(vit)
    flat = [n for names in groups.values() for n in names]
    assert len(flat) == len(set(flat)) == len(list(vit.named_parameters()))
    assert "cls_token" in groups["other"] and "pos_embed" in groups["other"]


@pytest.mark.parametrize("bad, match", [
    ("MLP", "unknown choice 'MLP'"), ("", "must be one of"), ("full+MHA", "cannot be combined"),
])
def test_parse_train_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        T.parse_train(bad)


def test_choose_components_greedy_budget(vit):
    groups = T.parameter_groups(vit)
    size = {c: T.count_parameters(vit, groups[c]) for c in T.COMPONENTS}
    head = T.count_parameters(vit, groups["head"])
    plast = {"MHA": 1.5, "FC1": 1.2, "FC2": 1.1, "LN2": 0.6, "LN1": 0.4}
    # MHA fits, FC1 does not, LN2 and LN1 (small) still fit
    budget = head + size["MHA"] + size["LN2"] + size["LN1"] + 1
    assert budget < head + size["MHA"] + size["FC1"]
    assert auto.choose_components(plast, vit, budget) == ["MHA", "LN2", "LN1"]
    assert auto.choose_components(plast, vit, None) == ["MHA"]
    assert auto.choose_components({**plast, "MHA": float("nan")}, vit, None) == ["FC1"]
    with pytest.raises(ValueError, match="smaller than the head"):
        auto.choose_components(plast, vit, head - 1)
    chosen = auto.choose_components(plast, vit, head + size["FC2"])
    assert chosen and chosen[0] in ("MHA", "FC1", "FC2")


def test_choose_components_from_plasticity_result(vit):
    import vitplast_kernels as vk

    x = torch.randn(8, 3, 16, 16)
    with vk.capture(vit, protocol="in_situ", pairs="halves") as acts:
        vit(x)
    res = vk.pairwise_plasticity(acts)
    best = max(T.COMPONENTS, key=lambda c: float(res.mean(c).mean()))
    assert auto.choose_components(res, vit, None) == [best]


def test_lora_without_peft_says_what_to_install(vit, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'vitplast-kernels\[lora\]'"):
        lora.lora_config(["MHA"], vit)


def test_lora_config_targets_attention(vit):
    pytest.importorskip("peft")
    import copy

    cfg = lora.lora_config({"MHA": 2.0, "FC1": 1.0, "LN1": 5.0}, vit)  # LN has no LoRA target
    assert set(cfg.target_modules) == {f"blocks.{i}.attn.{m}" for i in range(DEPTH) for m in ("qkv", "proj")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = lora.apply_lora(copy.deepcopy(vit))
    names = _trainable(model)
    assert names and all("lora_" in n or ".head." in n for n in names)
    assert any("attn.qkv.lora_A" in n for n in names)


@pytest.mark.parametrize("rank", [1, 3, 8])
def test_lora_adds_rank_times_its_parameters_per_rank(vit, rank):
    """``lora_params_per_rank`` is what peft adds per unit of rank: rank r adds exactly r times it (the
    head, trainable too, aside), which is how the claim picks LoRA's rank at a budget."""
    pytest.importorskip("peft")
    import copy

    per_rank = lora.lora_params_per_rank(vit)
    # DEPTH blocks of attention, each qkv (32 -> 96) and proj (32 -> 32): (32 + 96) + (32 + 32) per rank
    assert per_rank == DEPTH * (32 + 96 + 32 + 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = lora.apply_lora(copy.deepcopy(vit), r=rank)
    adapters = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad and "lora_" in n)
    assert adapters == rank * per_rank


def test_a_lora_rank_in_the_train_value():
    """``lora:r=N`` is LoRA of rank N (the claim's runs at equal budget): its parts are LoRA's, its run
    directory names no character a file system might refuse, and a rank out of bounds is refused."""
    from vitplast.finetune.spec import run_name

    plan = T.TrainPlan.parse("lora:r=43")
    assert plan.parts == ("lora",) and plan.lora_rank == 43 and plan.is_lora and plan == "lora:r=43"
    assert T.TrainPlan.parse("lora").lora_rank is None and T.TrainPlan.parse(" LoRA : r = 2 ").lora_rank == 2
    assert __import__("pickle").loads(__import__("pickle").dumps(plan)).lora_rank == 43  # to a worker
    assert run_name("lora:r=43", 0.01, 1) == "lora_r_43-lr0.01-s1"
    assert run_name("MHA@0-2+FC1", 0.001, 0) == "MHA@0-2_FC1-lr0.001-s0"  # as before
    for bad in ("lora:r=0", "lora:r=5000"):
        with pytest.raises(ValueError, match=r"a LoRA rank must be in 1\.\.4096"):
            T.TrainPlan.parse(bad)
    with pytest.raises(ValueError):
        T.TrainPlan.parse("lora:r=4+MHA")
