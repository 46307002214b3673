"""The reproducibility record: versions (also what `vitplast --version` prints), the weights' sha256 and
hub revision, and the record in every output: run.json (measure), summary.json (finetune), profile.json;
profile times random weights by design and needs no --random-init."""

from __future__ import annotations

import hashlib
import json

import torch
from helpers import quiet
from vitplast.runs.provenance import file_sha256, version_text, versions, weights_record

TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            data="synthetic", model_kwargs=dict(patch_size=8, depth=1, embed_dim=16, num_heads=1))


def test_versions_and_the_version_line():
    v = versions()
    assert v["torch"] == torch.__version__ and set(v) == {"vitplast-kernels", "python", "torch", "timm",
                                                          "transformers"}
    line = version_text()
    assert line.startswith("vitplast ") and f"torch {torch.__version__}" in line and "timm " in line


def test_weights_record_hashes_the_file_and_reads_the_revision(tmp_path):
    snap = tmp_path / "hub" / "models--timm--x" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").write_bytes(b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()
    assert file_sha256(snap / "model.safetensors") == digest
    record = weights_record({"kind": "weights", "file": str(snap)})  # a folder: the weights file it holds
    assert record["sha256"] == digest and record["revision"] == "abc123"
    assert weights_record({"kind": "random"}) == {"kind": "random", "sha256": None}


def test_finetune_summary_carries_the_record(tmp_path):
    from vitplast.finetune import finetune

    res = finetune(**TINY, train="head", steps=1, batch_size=8, monitor_every=0, out=str(tmp_path / "r"),
                   reporter=quiet())
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    record = summary["provenance"]
    assert record == res.runs[0].provenance and record["versions"] == json.loads(json.dumps(versions()))
    assert record["weights"] == {"kind": "random", "sha256": None} and record["model"] == TINY["model"]
    assert record["data"]["data"] == "synthetic" and record["transform"]["size"] == 16


def test_profile_times_random_weights_without_a_flag(tmp_path):
    from vitplast.profile import profile

    rec = profile(model="vit_tiny_patch16_224.augreg_in21k", device="cpu", img_size=32, depth=1, reps=1,
                  threads=1, batch_size=4, paper="skip", no_layers=True, out=str(tmp_path / "p"),
                  reporter=quiet())
    saved = json.loads((tmp_path / "p" / "profile.json").read_text())["provenance"]
    assert saved["weights"] == {"kind": "random", "sha256": None} and rec["provenance"]["model"].endswith(
        "augreg_in21k")
    assert saved["versions"]["timm"] and saved["transform"] is None
