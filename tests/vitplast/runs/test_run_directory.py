"""Run directory of `vitplast finetune`: atomic files, torn metric lines, refusal to overwrite, resume."""

from __future__ import annotations

import json

import pytest
import torch
from vitplast.runs.rundir import RunDir, RunDirError, read_jsonl, save_atomic, write_json_atomic


def test_atomic_writes_leave_no_temporaries(tmp_path):
    write_json_atomic(tmp_path / "a.json", {"x": 1.5, "t": torch.tensor([1, 2])})
    save_atomic(tmp_path / "c.pt", {"w": torch.arange(3)})
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1.5, "t": [1, 2]}
    assert torch.equal(torch.load(tmp_path / "c.pt")["w"], torch.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "c.pt"]


def test_failed_write_keeps_the_old_file(tmp_path):
    write_json_atomic(tmp_path / "a.json", {"v": 1})
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "a.json", {"v": object()})
    assert json.loads((tmp_path / "a.json").read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_torn_last_line_is_dropped(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"iter": 0}\n{"iter": 1}\n{"iter": 2, "lo')
    assert read_jsonl(p) == [{"iter": 0}, {"iter": 1}]
    p.write_text('{"iter": 0}\n{"it\n{"iter": 2}\n')
    with pytest.raises(ValueError, match="line 2 of 3"):
        read_jsonl(p)  # corruption in the middle is not silently skipped: the file and line are named


def test_lifecycle_refuse_resume_and_truncate(tmp_path):
    cfg = {"steps": 10, "lr": 0.1, "progress": True}
    rd = RunDir(tmp_path / "run").open(cfg)
    for it in range(-1, 6):
        rd.log({"kind": "x", "iter": it})
    rd.save_checkpoint({"step": 3})
    rd.close()
    with pytest.raises(RunDirError, match="pass --resume"):
        RunDir(tmp_path / "run").open(cfg)
    with pytest.raises(RunDirError, match=r"lr: saved 0.1, now 0.2"):
        RunDir(tmp_path / "run").open({**cfg, "lr": 0.2}, resume=True)
    rd = RunDir(tmp_path / "run").open({**cfg, "progress": False}, resume=True)  # free key
    assert rd.checkpoint["step"] == 3 and not rd.finished
    assert [r["iter"] for r in rd.metrics()] == [-1, 0, 1, 2]  # iterations >= 3 are replayed
    rd.write_summary({"train": "head", "lr": 0.1, "seed": 0, "final_acc": 1.0, "initial_acc": 0.5,
                      "trainable_params": 10})
    rd.close()  # ends this writer's session (releases the directory's lock)
    with pytest.raises(RunDirError, match="already holds a finished run"):
        RunDir(tmp_path / "run").open(cfg)
    assert RunDir(tmp_path / "run").open(cfg, resume=True).finished


def test_foreign_directory_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="holds no vitplast run"):
        RunDir(tmp_path).open({"a": 1})
    assert (tmp_path / "notes.txt").read_text() == "mine"
