"""``--holdout``: the part of the training images a run never trains on, evaluated at its end
(``holdout_acc``), the same split in every process and on resume, checked before any file is written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers import Killed, kill_after, quiet
from vitplast.cli import main as cli_main
from vitplast.finetune import finetune
from vitplast.finetune.data import StepBatches, holdout_split, load_data
from vitplast.finetune.options import RunSettings
from vitplast.runs.rundir import read_jsonl

TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            model_kwargs=dict(patch_size=8, depth=1, embed_dim=16, num_heads=2), data="digits:0-2",
            monitor_every=0, batch_size=16, reporter=quiet())


def _run(out, **kw):
    return finetune(**{**TINY, "out": str(out), **kw})


@pytest.mark.slow
def test_split_is_disjoint_complete_and_the_same_in_another_process():
    kept, held = holdout_split(347, 0.1)
    assert held.numel() == 35 and kept.numel() == 312  # round(34.7)
    assert torch.equal(torch.sort(torch.cat([kept, held])).values, torch.arange(347))
    code = ("from vitplast.finetune.data import holdout_split\n"
            "print([t.tolist() for t in holdout_split(347, 0.1)])")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           check=True)
    assert json.loads(other.stdout) == [kept.tolist(), held.tolist()]
    assert holdout_split(347, 0.0)[1].numel() == 0 and holdout_split(347, 0.0)[0].numel() == 347


def test_no_held_out_image_is_ever_trained_on():
    settings = RunSettings(model="vit_tiny_patch16_224", random_init=True, data="digits:0-2", holdout=0.2)
    train, _, held = load_data(settings, 3, 8)
    whole, _, none = load_data(RunSettings(model="vit_tiny_patch16_224", random_init=True, data="digits:0-2"),
                               3, 8)
    assert none is None
    assert len(train) + len(held) == len(whole) and len(held) == round(0.2 * len(whole))
    # the rows each part holds are the rows of the whole training set at its positions
    assert torch.equal(train.images, whole.images[train.positions])
    assert torch.equal(held.images, whole.images[held.positions])
    feed = StepBatches(train, 16, seed=3)
    fed = torch.cat([feed.indices(it) for it in range(3 * feed.per_epoch)])  # three epochs' batches
    assert torch.equal(torch.cat([feed.get(0)[0], feed.get(1)[0]]), whole.images[train.positions[fed[:32]]])
    trained = set(train.positions[fed].tolist())
    assert len(train) >= len(trained) >= feed.per_epoch * 16 > 0
    assert not trained & set(held.positions.tolist())


@pytest.mark.slow
def test_run_records_holdout_acc_and_resumes_to_the_same(tmp_path):
    res = _run(tmp_path / "a", train="MHA", lr="1e-2", steps=4, holdout=0.1)
    summary = res.runs[0]
    assert 0 <= summary.holdout_acc <= 1
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["holdout_acc"] == summary.holdout_acc
    assert json.loads((tmp_path / "a" / "config.json").read_text())["holdout"] == 0.1
    rows = [r for r in read_jsonl(tmp_path / "a" / "metrics.jsonl") if r["kind"] == "holdout"]
    assert [(r["step"], r["acc"]) for r in rows] == [(4, summary.holdout_acc)]
    with pytest.raises(Killed):
        _run(tmp_path / "k", train="MHA", lr="1e-2", steps=4, holdout=0.1, checkpoint_every=2,
             after_step=kill_after(3))
    resumed = _run(tmp_path / "k", train="MHA", lr="1e-2", steps=4, holdout=0.1, checkpoint_every=2,
                   resume=True).runs[0]
    assert resumed.holdout_acc == summary.holdout_acc and resumed.final_acc == summary.final_acc
    off = _run(tmp_path / "off", train="MHA", lr="1e-2", steps=4).runs[0]
    assert off.holdout_acc is None

    def losses(run):
        return [r["loss"] for r in read_jsonl(tmp_path / run / "metrics.jsonl") if r["kind"] == "train"]

    assert losses("k") == losses("a") and losses("off") != losses("a")  # without it: other batches


def test_run_written_before_the_option_resumes_as_holdout_0(tmp_path):
    with pytest.raises(Killed):
        _run(tmp_path, train="head", lr="1e-2", steps=4, checkpoint_every=2, after_step=kill_after(2))
    config = tmp_path / "config.json"
    saved = json.loads(config.read_text())
    del saved["holdout"]
    config.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="--holdout 0"):
        _run(tmp_path, train="head", lr="1e-2", steps=4, checkpoint_every=2, resume=True, holdout=0.1)
    assert _run(tmp_path, train="head", lr="1e-2", steps=4, checkpoint_every=2,
                resume=True).runs[0].holdout_acc is None


@pytest.mark.parametrize("value, message", [
    ("1", "--holdout: must be in [0, 1)"),
    ("-0.1", "--holdout: must be >= 0"),
    ("half", "--holdout: expected a number"),
    ("0.001", "--holdout 0.001: holds out 0 of the"),  # digits:0-2 keeps ~430 training images
])
def test_bad_fraction_is_named_before_any_file(value, message, tmp_path, capsys):
    rc = cli_main(["finetune", "--model", "vit_tiny_patch16_224", "--random-init", "--img-size", "16",
                   "--model-arg", "patch_size=8", "--model-arg", "depth=1", "--data", "digits:0-2",
                   "--steps", "1", "--no-progress", "--holdout", value, "--out", str(tmp_path / "o")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and message in err[0], err
    assert list(tmp_path.iterdir()) == []
