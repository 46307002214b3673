"""`vitplast finetune` grids through the executors, on the embedded digits ViT: the same table from one
process, from ``--jobs 2`` processes, and from two ``--shard`` passes plus ``--analyse-only``; a
``--resume`` over runs of other options names every one before anything trains."""

from __future__ import annotations

import json

import pytest
from helpers import collecting, quiet
from vitplast.cli import main
from vitplast.finetune import finetune

GRID = dict(train="MHA,head", lr="3e-2", seed="0,1", steps=6, checkpoint_every=3, monitor_every=0, threads=1,
            plots=False, progress=False)


def _table(res) -> list[dict]:
    return res.table


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    out = tmp_path_factory.mktemp("ft") / "here"
    return out, finetune(out=str(out), **GRID, reporter=quiet())


def _metrics(out):
    return {p.parent.name: p.read_text() for p in sorted(out.glob("*/metrics.jsonl"))}


@pytest.mark.slow
def test_shards_then_analyse_only_give_the_grid(here, tmp_path):
    out, ref = here
    said = []
    first = finetune(out=str(tmp_path / "g"), **GRID, shard="1/2", reporter=collecting(said))
    assert first.shard == "1/2" and len(first.runs) == 2
    assert not (tmp_path / "g" / "grid_summary.json").exists()
    assert any("run the grid without --shard" in s for s in said)
    with pytest.raises(ValueError, match="--analyse-only: 2 of 4 runs are not finished"):
        finetune(out=str(tmp_path / "g"), **GRID, analyse_only=True, reporter=quiet())
    finetune(out=str(tmp_path / "g"), **GRID, shard="2/2", reporter=quiet())
    final = finetune(out=str(tmp_path / "g"), **GRID, analyse_only=True, reporter=quiet())
    assert _table(final) == _table(ref)
    assert _metrics(tmp_path / "g") == _metrics(out)
    saved = json.loads((tmp_path / "g" / "grid_summary.json").read_text())
    assert saved["table"] == json.loads((out / "grid_summary.json").read_text())["table"]


def test_the_result_is_typed_and_is_what_grid_summary_json_holds(here):
    out, res = here
    saved = json.loads((out / "grid_summary.json").read_text())
    assert {k: v for k, v in saved.items() if k != "config"} == res.to_json()
    assert [(s.train, s.seed) for s in res.runs] == [("MHA", 0), ("MHA", 1), ("head", 0), ("head", 1)]
    frame = res.to_dataframe()
    assert list(frame["train"]) == ["MHA", "head"] and frame["acc_mean"].between(0, 1).all()


def test_resume_over_runs_of_other_options_names_them_all(here, capsys):
    out, _ = here
    argv = ["finetune", "--out", str(out), "--train", "MHA,head", "--lr", "3e-2", "--seed", "0,1", "--steps",
            "7", "--checkpoint-every", "3", "--monitor-every", "0", "--no-plots", "--no-progress", "--resume"]
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1
    assert "4 existing run(s) were trained with options that differ: steps: saved 6, now 7" in err[0]
    for name in ("MHA-lr0.03-s0", "MHA-lr0.03-s1", "head-lr0.03-s0", "head-lr0.03-s1"):
        assert name in err[0]


@pytest.mark.slow
def test_two_processes_give_the_same_grid(here, tmp_path):
    out, ref = here
    res = finetune(out=str(tmp_path / "p"), **GRID, jobs=2, reporter=quiet())
    assert _table(res) == _table(ref) and _metrics(tmp_path / "p") == _metrics(out)


def test_an_array_task_shards_a_grid_but_not_a_single_run(tmp_path, monkeypatch):
    from vitplast.finetune import finetune_options

    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    grid = finetune_options(out=str(tmp_path / "g"), train="MHA,head", seed="0,1")
    assert str(grid.shard) == "4/4" and grid.shard_env
    one = finetune_options(out=str(tmp_path / "o"), train="MHA", lr="1e-3")  # the task picked its own run
    assert one.shard is None
    assert finetune_options(out=str(tmp_path / "g"), train="MHA,head", shard="none").shard is None
