"""The shipped default digits ViT: it loads, hashes as recorded, reaches its recorded accuracy, and the
default config and seed use it without pretraining or consulting the cache (the same model on every
machine); other configs still pretrain into the cache."""

from __future__ import annotations

import hashlib
import json

import pytest
import vitplast.models.digits as digits
from vitplast.data.datasets import load_dataset


def test_shipped_file_hashes_as_recorded_and_records_its_config():
    path = digits.shipped_checkpoint()
    assert path is not None and path.is_file() and path.stat().st_size < 1_000_000
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digits.SHIPPED["sha256"]
    info = digits.checkpoint_info(path)
    assert info["config"] == json.loads(json.dumps(digits.DigitsConfig().__dict__))
    assert info["seed"] == "0" and float(info["val_acc"]) == digits.SHIPPED["val_acc"]
    assert "train_seconds" not in info  # nothing of the machine or the clock in the file


def test_shipped_model_reaches_its_recorded_accuracy():
    model = digits.build_digits_vit(weights=digits.shipped_checkpoint())
    val = load_dataset("digits:0-4", "val", img_size=32, seed=0)
    assert sum(p.numel() for p in model.parameters()) < 250_000
    # the recorded accuracy, up to one image whose argmax another CPU's float rounding could flip
    assert abs(digits.digits_accuracy(model, val) - digits.SHIPPED["val_acc"]) <= 1 / len(val) + 1e-6


def test_default_uses_the_shipped_file_and_never_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(digits, "pretrain", lambda *a, **k: pytest.fail("the default must not pretrain"))
    path = digits.digits_checkpoint(tmp_path, seed=0)
    assert path == digits.shipped_checkpoint() and list(tmp_path.iterdir()) == []
    assert digits.shipped_checkpoint(seed=1) is None
    assert digits.shipped_checkpoint(digits.DigitsConfig(epochs=99)) is None


def test_a_damaged_shipped_file_is_named(tmp_path, monkeypatch):
    bad = tmp_path / f"digits_vit-{digits.SHIPPED['key']}.safetensors"
    bad.write_bytes(digits.shipped_checkpoint().read_bytes()[:-1] + b"\0")
    monkeypatch.setattr(digits, "SHIPPED_DIR", tmp_path)
    monkeypatch.setattr(digits, "_SHIPPED_CHECKED", set())
    with pytest.raises(ValueError, match=r"digits_vit-.*damaged.*reinstall"):
        digits.digits_checkpoint()
