"""timm models by the names their users type, with timm's own pretrained loading run for real against a
test-built, offline Hugging Face hub cache: tagged names and hf-hub: names load the cached weights,
--weights takes a hub snapshot folder, pretrained_cfg_overlay's file is loaded, the transform is the
model's config; without weights to load a command refuses, naming the three ways out."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import pytest
import torch
from helpers import image_folder
from offline_hub import REVISION, add_snapshot, offline_cache, timm_config
from vitplast.cli import main
from vitplast.models.builder import build_model
from vitplast.options.groups import ModelOptions

TAG = "vit_tiny_patch16_224.augreg_in21k"
REPO = f"timm/{TAG}"
AUGREG = dict(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5], interpolation="bicubic", crop_pct=0.9,
              input_size=[3, 224, 224], crop_mode="center")


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> tuple[Path, dict]:
    """The safetensors file of a seeded ViT-Ti/16 (10 classes) and its tensors."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(1234)
    state = {k: v.contiguous() for k, v in timm.create_model("vit_tiny_patch16_224", num_classes=10)
             .state_dict().items()}
    path = tmp_path_factory.mktemp("w") / "model.safetensors"
    save_file(state, str(path))
    return path, state


@pytest.fixture
def hub(tmp_path, monkeypatch, weights) -> Path:
    """An offline hub cache holding ``timm/vit_tiny_patch16_224.augreg_in21k``."""
    cache = offline_cache(tmp_path / "hf", monkeypatch)
    add_snapshot(cache, REPO, {"model.safetensors": weights[0].read_bytes(),
                               "config.json": timm_config("vit_tiny_patch16_224", AUGREG)})
    return cache


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """An ImageFolder of 2 classes x 4 random 40x30 PNGs."""
    return image_folder(tmp_path_factory.mktemp("imgs"), 30, 40)


def _same_blocks(net, state) -> bool:
    own = net.state_dict()
    return all(torch.equal(own[k], v) for k, v in state.items() if k.startswith(("blocks.", "cls_token")))


def _cli(argv, capsys) -> tuple[int, list[str]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(argv)
    return rc, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


@pytest.mark.slow
def test_tagged_and_hf_hub_names_load_the_cached_weights(hub, weights):
    for name in (TAG, f"hf-hub:{REPO}"):
        built = build_model(ModelOptions(model=name, pretrained=True).model_request(), 2)
        assert _same_blocks(built.net, weights[1]), name
        assert built.net.head.out_features == 2  # a fresh head for the data's classes
        assert built.origin["kind"] == "pretrained" and built.origin["hub_id"] == REPO
        assert built.origin["revision"] == REVISION
        t = built.transform
        assert (t.mean, t.std, t.interpolation, t.crop_pct) == ((0.5,) * 3, (0.5,) * 3, "bicubic", 0.9)


@pytest.mark.slow
def test_model_arg_pretrained_and_overlay_file(hub, weights, tmp_path):
    built = build_model(ModelOptions(model=TAG, model_kwargs={"pretrained": True}).model_request(), 3)
    assert _same_blocks(built.net, weights[1])
    other = {k: v + 1 for k, v in weights[1].items()}
    from safetensors.torch import save_file

    save_file(other, str(tmp_path / "other.safetensors"))
    overlay = {"pretrained_cfg_overlay": {"file": str(tmp_path / "other.safetensors")}}
    with pytest.raises(ValueError, match="--model-arg pretrained_cfg_overlay: .*only with --pretrained"):
        ModelOptions(model="vit_tiny_patch16_224", model_kwargs=overlay)
    opts = ModelOptions(model="vit_tiny_patch16_224", pretrained=True, model_kwargs=overlay)
    built = build_model(opts.model_request(), 3)
    assert _same_blocks(built.net, other) and built.origin["file"] == str(tmp_path / "other.safetensors")


def test_a_hub_snapshot_folder_as_weights_gives_its_model(hub, weights):
    snapshot = hub / f"models--timm--{TAG}" / "snapshots" / REVISION
    built = build_model(ModelOptions(model=None, weights=str(snapshot)).model_request(), 2)
    assert _same_blocks(built.net, weights[1]) and built.transform.mean == (0.5,) * 3
    named = build_model(ModelOptions(model="vit_tiny_patch16_224", weights=str(snapshot)).model_request(), 2)
    assert _same_blocks(named.net, weights[1])


def test_measure_pretrained_records_the_hash_and_revision(hub, weights, images, tmp_path, capsys):
    out = tmp_path / "res"
    rc, lines = _cli(["measure", "--model", TAG, "--pretrained", "--data", str(images), "--img-size", "32",
                      "--batch-size", "4", "--batches", "1", "--no-progress", "--out", str(out)], capsys)
    assert rc == 0, lines
    run = json.loads((out / "run.json").read_text())
    record = run["provenance"]
    assert record["weights"]["sha256"] == hashlib.sha256(weights[0].read_bytes()).hexdigest()
    assert record["weights"]["revision"] == REVISION and record["weights"]["hub_id"] == REPO
    assert record["transform"]["mean"] == [0.5] * 3 and run["transform"]["size"] == 32
    assert set(record["versions"]) >= {"vitplast-kernels", "torch", "timm", "transformers"}
    assert run["pretrained"] is True and record["data"]["data"] == str(images)


@pytest.mark.parametrize("command", ["measure", "finetune", "claim"])
def test_a_model_without_weights_is_refused_naming_the_ways_out(command, hub, images, tmp_path, capsys):
    out = tmp_path / "out"
    rc, lines = _cli([command, "--model", TAG, "--data", str(images), "--out", str(out)], capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"vitplast {command}: error: --model {TAG}: no weights would be loaded")
    assert all(flag in lines[0] for flag in ("--pretrained", "--weights FILE", "--random-init"))
    assert not out.exists()


def test_pretrained_weights_not_in_the_cache_are_one_line(hub, images, tmp_path, capsys):
    out = tmp_path / "out"
    rc, lines = _cli(["measure", "--model", "vit_small_patch16_224.augreg_in21k", "--pretrained", "--data",
                      str(images), "--out", str(out)], capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert "--pretrained: timm cannot load the weights of vit_small_patch16_224.augreg_in21k" in lines[0]
    assert "HF_HUB_OFFLINE" in lines[0] and not out.exists()


def test_contradicting_flags_are_refused():
    with pytest.raises(ValueError, match="--random-init: it contradicts --pretrained"):
        ModelOptions(model=TAG, pretrained=True, random_init=True)
    with pytest.raises(ValueError, match="--pretrained: --weights already gives the weights"):
        ModelOptions(model=TAG, pretrained=True, weights="w.pth")
    with pytest.raises(ValueError, match="--model-arg checkpoint_path: pass the checkpoint as --weights"):
        ModelOptions(model=TAG, model_kwargs={"checkpoint_path": "w.pth"}, random_init=True)
    with pytest.raises(ValueError, match="looks like a Hugging Face hub id: .* hf:google/vit-base-patch16"):
        ModelOptions(model="google/vit-base-patch16-224")
    assert ModelOptions().model == "digits-vit"  # the embedded ViT needs no flag


def test_the_normalisation_comes_from_the_model_config():
    augreg = build_model(ModelOptions(model="vit_tiny_patch16_224", random_init=True, img_size=32,
                                      model_kwargs={"depth": 1}).model_request(), 2).transform
    deit = build_model(ModelOptions(model="deit_tiny_patch16_224", random_init=True, img_size=32,
                                    model_kwargs={"depth": 1}).model_request(), 2).transform
    assert augreg.mean == (0.5,) * 3 and augreg.size == 32
    assert deit.mean == pytest.approx((0.485, 0.456, 0.406)) and deit.interpolation == "bicubic"


@pytest.mark.slow
def test_finetune_and_claim_take_the_same_model_arguments(hub, weights, images, tmp_path, capsys):
    out = tmp_path / "run"
    rc, lines = _cli(["finetune", "--model", TAG, "--pretrained", "--data", str(images), "--img-size", "32",
                      "--train", "MHA", "--steps", "2", "--batch-size", "4", "--no-plots", "--no-progress",
                      "--out", str(out)], capsys)
    assert rc == 0, lines
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["weights"]["revision"] == REVISION
    assert summary["provenance"]["transform"]["mean"] == [0.5] * 3
    config = json.loads((out / "config.json").read_text())
    assert config["pretrained"] and config["augment"] and config["optimizer"] == "sgd"
    from vitplast.claim import claim_options

    opts = claim_options(model=TAG, pretrained=True, data=str(images), out=str(tmp_path / "claim"))
    assert opts.pretrained and opts.model == TAG
