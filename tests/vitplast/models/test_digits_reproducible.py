"""The digits ViT's pretrained checkpoints as artefacts: two pretrainings of one (config, seed) on one
machine write byte-identical files (nothing of the clock or the host in their metadata), the first
pretraining says so in one line on any stream, and run.json records the file's sha256."""

from __future__ import annotations

import hashlib
import json
import warnings

from vitplast.cli import main
from vitplast.models.digits import DigitsConfig, checkpoint_info, digits_checkpoint

TINY = {"epochs": 1, "depth": 1, "embed_dim": 16, "num_heads": 2, "batch_size": 256, "warmup_epochs": 0}


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_pretrainings_write_the_same_bytes_and_say_so_once(tmp_path, capsys):
    cfg = DigitsConfig(**TINY)
    first = digits_checkpoint(tmp_path / "a", seed=3, progress=False, config=cfg)
    err = capsys.readouterr().err
    assert "pretraining the digits ViT once, about" in err and f"cached in {tmp_path / 'a'}" in err
    second = digits_checkpoint(tmp_path / "b", seed=3, progress=False, config=cfg)
    assert _sha256(first) == _sha256(second)
    capsys.readouterr()
    assert set(checkpoint_info(first)) == {"config", "seed", "val_acc", "torch"}
    digits_checkpoint(tmp_path / "a", seed=3, progress=False, config=cfg)  # cached: nothing said
    assert "pretraining" not in capsys.readouterr().err


def test_run_json_records_the_checkpoint_hash(tmp_path, capsys):
    out, cache = tmp_path / "out", tmp_path / "cache"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["measure", "--pretrain-config", json.dumps(TINY), "--cache-dir", str(cache), "--batches",
                   "1", "--batch-size", "8", "--no-progress", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    weights = json.loads((out / "run.json").read_text())["provenance"]["weights"]
    (path,) = cache.glob("digits_vit-*.safetensors")
    assert weights["file"] == str(path) and weights["sha256"] == _sha256(path)
