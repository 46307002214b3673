"""End-to-end `vitplast finetune` on a tiny timm ViT: learning, monitoring, resume, refusal, errors."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch
from helpers import Killed, kill_after, quiet
from vitplast.cli import main as cli_main
from vitplast.finetune import finetune
from vitplast.finetune.selection import TRAIN_ORDER
from vitplast.runs.rundir import read_jsonl

DEPTH = 2
TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            model_kwargs=dict(patch_size=8, depth=DEPTH, embed_dim=32, num_heads=2))


def _run(tmp_path, name="run", **kw):
    opts = {**TINY, "data": "synthetic", "out": str(tmp_path / name), "reporter": quiet(), **kw}
    return finetune(**opts)


@pytest.mark.slow
def test_short_run_learns_and_monitors_every_component(tmp_path):
    res = _run(tmp_path, train="full", lr="3e-3", steps=24, batch_size=32, monitor_every=5, eval_every=8)
    s = res.runs[0]
    assert s.final_acc >= 0.8 > 0.25 + 0.3  # 4 classes: chance is 0.25
    recs = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    mon = [r for r in recs if r["kind"] == "monitor"]
    assert [r["iter"] for r in mon] == [0, 5, 10, 15, 20]  # monitored iterations only
    for r in mon:
        assert set(r["plasticity"]) == set(TRAIN_ORDER)
        for c in TRAIN_ORDER:
            assert len(r["plasticity"][c]) == DEPTH
            assert all(math.isfinite(v) and v > 0 for v in r["plasticity"][c])
            assert r["pairs"][c] == [16] * DEPTH  # halves of 32
        assert set(r["grad_norm"]) == set(TRAIN_ORDER) | {"head", "other"}
        assert all(v > 0 for v in r["grad_norm"].values())
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [0, 8, 16, 24]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_acc"] == s.final_acc


def test_probe_monitoring_is_fixed_and_frozen_blocks_stay_put(tmp_path):
    # training only the head leaves every block unchanged: on the same probe pairs, plasticity must
    # be identical at every monitored step (a changing probe or pairing would show here)
    _run(tmp_path, train="head", steps=9, batch_size=16, monitor_every=4, probe=12)
    mon = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "monitor"]
    assert len(mon) == 3 and all(r["source"] == "probe" for r in mon)
    assert all(r["pairs"]["MHA"] == [6] * DEPTH for r in mon)
    assert mon[0]["plasticity"] == mon[1]["plasticity"] == mon[2]["plasticity"]
    assert set(mon[0]["grad_norm"]) == {"head"}  # frozen components have no gradient


def test_bf16_autocast_run_monitors_finite_values(tmp_path):
    _run(tmp_path, train="FC1", amp="bf16", steps=2, batch_size=16, monitor_every=1, grad_clip=1.0)
    mon = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "monitor"]
    assert len(mon) == 2
    assert all(math.isfinite(v) for r in mon for c in TRAIN_ORDER for v in r["plasticity"][c])
    assert set(mon[0]["grad_norm"]) == {"FC1", "head"}


def test_tensorboard_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # its import raises ImportError
    with pytest.raises(ImportError, match="pip install tensorboard"):
        _run(tmp_path, train="head", steps=1, batch_size=16, tensorboard=True)
    assert not (tmp_path / "run").exists()  # refused before any directory is made


def test_tensorboard_logs_are_written(tmp_path):
    pytest.importorskip("tensorboard")
    _run(tmp_path, train="head", steps=1, batch_size=16, tensorboard=True)
    assert any((tmp_path / "run" / "tb").iterdir())


@pytest.mark.slow
def test_kill_and_resume_equals_uninterrupted(tmp_path):
    kw = dict(train="MHA", optimizer="sgd", lr="0.05", schedule="cosine", steps=12, batch_size=16,
              monitor_every=3, eval_every=4, checkpoint_every=4, seed="3")
    _run(tmp_path, "whole", **kw)
    with pytest.raises(Killed):
        # last checkpoint: step 4; logged up to iter 5
        _run(tmp_path, "killed", after_step=kill_after(6), **kw)
    assert torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)["step"] == 4
    with pytest.raises(ValueError, match="pass --resume"):
        _run(tmp_path, "killed", **kw)
    _run(tmp_path, "killed", resume=True, **kw)
    a = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] == 12
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    ra, rb = (read_jsonl(tmp_path / d / "metrics.jsonl") for d in ("whole", "killed"))
    assert ra == rb  # every record, in order, bit for bit
    sa, sb = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("whole", "killed"))
    assert sa["final_acc"] == sb["final_acc"]


@pytest.mark.slow
def test_grid_aggregates_and_refuses_to_overwrite(tmp_path):
    res = _run(tmp_path, train="LN1,head", seed="0,1", steps=4, batch_size=16, monitor_every=2)
    assert len(res.runs) == 4
    rows = {r["train"]: r for r in res.table}
    assert set(rows) == {"LN1", "head"} and rows["LN1"]["n"] == 2
    accs = [s.final_acc for s in res.runs if s.train == "LN1"]
    assert rows["LN1"]["acc_mean"] == pytest.approx(sum(accs) / 2)
    assert rows["LN1"]["gain_at_lr"] == pytest.approx(rows["LN1"]["acc_mean"] - rows["head"]["acc_mean"])
    assert rows["LN1"]["plasticity"] > 0 and "plasticity" not in rows["head"]
    assert "LN1" in res.table_text and "±" in res.table_text
    assert (tmp_path / "run" / "grid_summary.json").exists()
    with pytest.raises(ValueError, match="refusing to overwrite"):
        _run(tmp_path, train="LN1,head", seed="0,1", steps=4, batch_size=16, monitor_every=2)
    again = _run(tmp_path, train="LN1,head", seed="0,1", steps=4, batch_size=16, monitor_every=2,
                 resume=True)  # loads the finished runs, trains nothing
    assert [s.final_acc for s in again.runs] == [s.final_acc for s in res.runs]


@pytest.mark.slow
def test_auto_picks_components_within_budget(tmp_path):
    res = _run(tmp_path, train="auto", budget=700, steps=3, batch_size=16, monitor_every=0)
    s = res.runs[0]
    assert s.trainable_params <= 700 and s.trained
    auto = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "auto"]
    assert auto and set(auto[0]["plasticity"]) == set(TRAIN_ORDER) and auto[0]["chosen"] == list(s.trained)


def test_embedded_model_rejects_other_sizes(tmp_path, capsys):
    argv = ["finetune", "--out", str(tmp_path / "o"), "--img-size", "64"]
    assert cli_main(argv) == 2
    assert "digits-vit takes 32x32 images" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, message", [
    (["--train", "MLP"], "unknown choice 'MLP'"),
    (["--lr", "fast"], "--lr: expected a number, got 'fast'"),
    (["--lr", "-1"], "--lr: must be a positive number"),
    (["--steps", "0"], "--steps: must be an integer in 1.."),
    (["--batch-size", "7"], "--batch-size 7: must be even"),
    (["--probe", "3"], "--probe: must be an even number"),
    (["--train", "auto"], "--train auto needs --budget"),
    (["--budget", "10"], "--budget only applies to --train auto"),
    (["--data", "cifar10:/nonexistent/dir"], "nothing is downloaded"),
    (["--batch-size", "4096"], "exceeds the training set"),
])
def test_bad_arguments_give_clear_errors(tmp_path, capsys, argv, message):
    base = ["finetune", "--out", str(tmp_path / "o"), "--model", "vit_tiny_patch16_224", "--img-size", "16",
            "--model-arg", "patch_size=8", "--model-arg", "depth=1", "--model-arg", "embed_dim=16",
            "--model-arg", "num_heads=1", "--data", "synthetic", "--steps", "2", "--no-plots",
            "--random-init"]
    assert cli_main(base + argv) == 2
    err = capsys.readouterr().err
    assert "vitplast finetune: error:" in err and message in err, err
