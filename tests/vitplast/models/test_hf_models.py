"""Hugging Face transformers image models in every command (--model hf:ID_OR_DIR): a save_pretrained
ViT is measured and finetuned through the CLI, with its image processor's normalisation, its components
from the presets, a fresh head for the new classes, its weights' hash in the record; by hub id from an
offline cache; from its config alone with --random-init."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import pytest
import torch
from helpers import image_folder
from offline_hub import REVISION, add_snapshot, offline_cache
from vitplast.cli import main
from vitplast.models.builder import build_model
from vitplast.options.groups import ModelOptions

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def vit_dir(tmp_path_factory) -> Path:
    """A save_pretrained tiny transformers ViT (32x32 images, 3 labels) with an image processor whose
    mean is (0.1, 0.2, 0.3)."""
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(7)
    folder = tmp_path_factory.mktemp("hf_vit")
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64, num_labels=3)
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(image_mean=[0.1, 0.2, 0.3], image_std=[0.5, 0.5, 0.5],
                      size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """An ImageFolder of 2 classes x 4 random 36x36 PNGs."""
    return image_folder(tmp_path_factory.mktemp("imgs"), 36, 36)


def _saved(folder: Path) -> dict:
    """The tensors of the saved model, by the names of the built model's modules."""
    from transformers import ViTForImageClassification

    return ViTForImageClassification.from_pretrained(folder).state_dict()


def _cli(argv, capsys) -> tuple[int, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(argv)
    return rc, capsys.readouterr().err


def test_a_save_pretrained_folder_is_built_with_its_weights_and_processor(vit_dir):
    built = build_model(ModelOptions(model=f"hf:{vit_dir}").model_request(), 5)
    own = built.net.model.state_dict()
    saved = _saved(vit_dir)
    assert all(torch.equal(own[k], v) for k, v in saved.items() if not k.startswith("classifier"))
    assert built.net.get_classifier().out_features == 5 and built.img_size == 32
    assert built.transform.mean == pytest.approx((0.1, 0.2, 0.3)) and built.transform.crop_mode == "squash"
    assert built.net(torch.randn(2, 3, 32, 32)).shape == (2, 5)
    assert built.origin["kind"] == "pretrained" and built.origin["file"].endswith("model.safetensors")
    random_init = ModelOptions(model=f"hf:{vit_dir}", random_init=True).model_request()
    random = build_model(random_init, 3).net.model.state_dict()
    assert not torch.equal(random["vit.layers.0.mlp.fc1.weight"], saved["vit.layers.0.mlp.fc1.weight"])
    as_weights = ModelOptions(model=None, weights=str(vit_dir)).model_request()  # a folder given as --weights
    folder = build_model(as_weights, 3)
    fc1 = folder.net.model.state_dict()["vit.layers.0.mlp.fc1.weight"]
    assert folder.name == f"hf:{vit_dir}" and torch.equal(fc1, saved["vit.layers.0.mlp.fc1.weight"])


def test_measure_cli_on_an_hf_folder(vit_dir, images, tmp_path, capsys):
    out = tmp_path / "res"
    rc, err = _cli(["measure", "--model", f"hf:{vit_dir}", "--data", str(images), "--batch-size", "4",
                    "--batches", "1", "--no-progress", "--out", str(out)], capsys)
    assert rc == 0, err
    result = json.loads((out / "plasticity.json").read_text())
    assert set(result["components"]) == {"LN1", "MHA", "LN2", "FC1", "FC2"}
    record = json.loads((out / "run.json").read_text())["provenance"]
    digest = hashlib.sha256((vit_dir / "model.safetensors").read_bytes()).hexdigest()
    assert record["weights"]["sha256"] == digest and record["model"] == f"hf:{vit_dir}"
    assert record["transform"]["mean"] == pytest.approx([0.1, 0.2, 0.3])


@pytest.mark.slow
def test_finetune_cli_on_an_hf_folder_replaces_the_head(vit_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["finetune", "--model", f"hf:{vit_dir}", "--data", "synthetic", "--train", "MHA", "--steps", "2",
            "--batch-size", "8", "--no-plots", "--no-progress", "--export", "--out", str(out)]
    rc, err = _cli(argv, capsys)
    assert rc == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["weights"]["kind"] == "pretrained" and summary["trained"] == ["MHA"]
    from safetensors.torch import load_file

    exported = load_file(str(out / "model.safetensors"))
    assert exported["model.classifier.weight"].shape == (4, 32)  # synthetic: 4 classes
    saved = _saved(vit_dir)
    assert torch.equal(exported["model.vit.layers.0.mlp.fc1.weight"], saved["vit.layers.0.mlp.fc1.weight"])
    assert not torch.equal(exported["model.vit.layers.0.attention.q_proj.weight"],
                           saved["vit.layers.0.attention.q_proj.weight"])


def test_a_hub_id_is_read_from_the_offline_cache(vit_dir, tmp_path, monkeypatch):
    cache = offline_cache(tmp_path / "hf", monkeypatch)
    add_snapshot(cache, "org/tiny-vit", {f.name: f.read_bytes() for f in vit_dir.iterdir()})
    built = build_model(ModelOptions(model="hf:org/tiny-vit").model_request(), 3)
    assert built.origin["hub_id"] == "org/tiny-vit" and built.origin["revision"] == REVISION
    with pytest.raises(ValueError, match="--model hf:org/absent: .*HF_HUB_OFFLINE"):
        build_model(ModelOptions(model="hf:org/absent").model_request(), 3)


def test_a_folder_without_processor_gets_its_model_types_defaults(vit_dir, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(vit_dir / name, bare / name)
    built = build_model(ModelOptions(model=f"hf:{bare}").model_request(), 3)
    assert built.transform.mean == (0.5,) * 3 and "defaults of ViTImageProcessor" in built.transform.source
