"""Every model is built through its family's entry of the registry (`vitplast.models.families`):
build_model reads the plan, hands it to the family's builder and loads --weights over what it built."""

from __future__ import annotations

import dataclasses

import torch
from vitplast.models import builder, families
from vitplast.models.built import BuiltModel
from vitplast.options.groups import ModelOptions


def _stub_family(seen: list):
    def build(plan, request):
        seen.append((plan.source.kind, plan.source.ref, request.num_classes))
        net = torch.nn.Sequential(torch.nn.Linear(4, request.num_classes))
        return BuiltModel(net.eval(), 8, "stub", plan.source.name, {}, None, {"kind": "random"})

    return dataclasses.replace(families.FAMILIES["timm"], build=build)


def test_build_model_hands_the_plan_to_the_familys_builder(monkeypatch):
    seen: list = []
    monkeypatch.setitem(families.FAMILIES, "timm", _stub_family(seen))
    opts = ModelOptions(model="vit_tiny_patch16_224", random_init=True)
    built = builder.build_model(opts.model_request(), 3)
    assert seen == [("timm", "vit_tiny_patch16_224", 3)]
    assert built.description == "stub" and built.net[0].out_features == 3


def test_weights_are_loaded_over_what_the_family_built(monkeypatch, tmp_path):
    from safetensors.torch import save_file

    seen: list = []
    monkeypatch.setitem(families.FAMILIES, "timm", _stub_family(seen))
    weights = {"0.weight": torch.full((3, 4), 0.25), "0.bias": torch.zeros(3)}
    save_file(weights, str(tmp_path / "w.safetensors"))
    opts = ModelOptions(model="vit_tiny_patch16_224", weights=str(tmp_path / "w.safetensors"))
    built = builder.build_model(opts.model_request(), 3)
    assert seen and torch.equal(built.net[0].weight, weights["0.weight"])
