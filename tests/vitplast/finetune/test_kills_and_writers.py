"""`vitplast finetune` under kills and concurrent writers: no duplicate or missing metrics row after a
kill at any point (before the first checkpoint included), the training loss of every step, every row in
TensorBoard, the run directory's lock, and --export."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import vitplast.finetune.log as finetune_log
import vitplast.finetune.options as finetune_options
from helpers import Killed, collecting, kill_after, quiet
from vitplast.cli import main
from vitplast.finetune import finetune
from vitplast.runs.rundir import RunDir, RunDirError, read_jsonl

TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            data="synthetic", model_kwargs=dict(patch_size=8, depth=2, embed_dim=32, num_heads=2),
            batch_size=16)
KW = dict(train="MHA", optimizer="sgd", lr="0.05", steps=8, monitor_every=3, eval_every=4, seed="3")


def _run(path: Path, **kw):
    return finetune(**TINY, out=str(path), reporter=quiet(), **kw)


class FakeWriter:
    """Stands for TensorBoard's SummaryWriter: what each log directory holds, (tag, value, step)."""

    logs: dict[str, list] = defaultdict(list)

    def __init__(self, log_dir: str) -> None:
        self.dir = log_dir
        if not Path(log_dir).exists():  # a fresh directory: nothing from before
            FakeWriter.logs[log_dir] = []
        Path(log_dir).mkdir(parents=True, exist_ok=True)

    def add_scalar(self, tag, value, step):
        FakeWriter.logs[self.dir].append((tag, float(value), int(step)))

    def add_text(self, tag, text, step):
        FakeWriter.logs[self.dir].append((tag, text, int(step)))

    def close(self):
        pass


@pytest.fixture
def fake_tensorboard(monkeypatch):
    FakeWriter.logs.clear()
    for module in (finetune_log, finetune_options):
        monkeypatch.setattr(module, "tensorboard_writer_class", lambda: FakeWriter)
    return FakeWriter.logs


def _rows(path: Path) -> list[dict]:
    return read_jsonl(path / "metrics.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("stop_after,checkpoint_every,train", [
    (2, 4, "MHA"),    # killed before the first checkpoint
    (3, 0, "auto"),   # no checkpoint before the end; --train auto logs its choice first
    (6, 4, "MHA"),    # killed after a checkpoint, rows of later iterations logged
])
def test_kill_at_any_point_leaves_every_row_once(tmp_path, fake_tensorboard, stop_after,
                                                 checkpoint_every, train):
    kw = {**KW, "train": train, "checkpoint_every": checkpoint_every, "tensorboard": True,
          **({"budget": 5000} if train == "auto" else {})}
    _run(tmp_path / "whole", **kw)
    with pytest.raises(Killed):
        _run(tmp_path / "killed", after_step=kill_after(stop_after), **kw)
    _run(tmp_path / "killed", resume=True, **kw)
    whole, killed = _rows(tmp_path / "whole"), _rows(tmp_path / "killed")
    assert killed == whole  # every row once, in order, bit for bit
    kinds = [(r["kind"], r["iter"]) for r in whole]
    assert len(kinds) == len(set(kinds))
    assert [r["iter"] for r in whole if r["kind"] == "train"] == list(range(8))  # the loss of every step
    assert kinds.count(("eval", -1)) == 1 and kinds.count(("auto", -1)) == (train == "auto")
    monitored = {r["iter"]: r["loss"] for r in whole if r["kind"] == "monitor"}
    train_loss = {r["iter"]: r["loss"] for r in whole if r["kind"] == "train"}
    assert sorted(monitored) == [0, 3, 6] and all(train_loss[i] == monitored[i] for i in monitored)
    tb_whole = fake_tensorboard[str(tmp_path / "whole" / "tb")]
    tb_killed = fake_tensorboard[str(tmp_path / "killed" / "tb")]
    assert tb_killed == tb_whole  # rebuilt from metrics.jsonl on resume: nothing twice, nothing lost
    steps = {(tag, step) for tag, _, step in tb_whole}
    assert ("eval/acc", 0) in steps and all(("train/loss", i) in steps for i in range(8))
    assert all(("plasticity/MHA", i) in steps for i in (0, 3, 6))
    assert len(tb_whole) == len(set((tag, step) for tag, _, step in tb_whole))


def _holder(path: Path) -> subprocess.Popen:
    """Another process holding the run directory's lock."""
    code = ("import sys, time; from vitplast.runs.rundir import RunLock; RunLock(sys.argv[1]).acquire(); "
            "print('locked', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.slow
def test_a_second_writer_is_refused_and_a_stale_lock_taken_over(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(Killed):
        _run(run, **KW, checkpoint_every=4, after_step=kill_after(5))
    proc = _holder(run)
    try:
        with pytest.raises(RunDirError, match=rf"in use by process {proc.pid} on "):
            _run(run, resume=True, **KW, checkpoint_every=4)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    said = []
    finetune(**TINY, out=str(run), resume=True, **KW, checkpoint_every=4,
             reporter=collecting(said))
    assert any(f"taking over the lock of process {proc.pid}" in s for s in said)
    assert json.loads((run / "summary.json").read_text())["steps"] == 8
    # within one process too: a directory held by one RunDir is refused to another
    first = RunDir(tmp_path / "other").open({"a": 1})
    with pytest.raises(RunDirError, match="in use by process"):
        RunDir(tmp_path / "other").open({"a": 1}, resume=True)
    first.close()
    RunDir(tmp_path / "other").open({"a": 1}, resume=True).close()
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == ["config.json"]  # released: no .lock


@pytest.mark.slow
@pytest.mark.parametrize("train", ["FC1", "lora"])
def test_export_writes_the_finetuned_weights(tmp_path, train):
    from safetensors.torch import load_file

    run = tmp_path / "run"
    _run(run, **{**KW, "train": train, "steps": 3}, export=True)
    exported = load_file(str(run / "model.safetensors"))
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)["model"]
    if train == "lora":
        from vitplast.finetune.lora import apply_lora
        from vitplast.finetune.model import fresh_model

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = apply_lora(fresh_model(finetune_options.RunSettings(**TINY), 4), r=8)
        ref.load_state_dict(ckpt)
        expected = ref.merge_and_unload().state_dict()
        assert json.loads((run / "adapter" / "adapter_config.json").read_text())["r"] == 8
        assert (run / "adapter" / "adapter_model.safetensors").stat().st_size > 0
    else:
        expected = ckpt
    assert set(exported) == set(expected)
    for k, v in expected.items():
        torch.testing.assert_close(exported[k], v, rtol=1e-6, atol=1e-7, msg=k)
    with warnings.catch_warnings():  # vitplast measure reads the export (architecture from config.json)
        warnings.simplefilter("ignore")
        assert main(["measure", "--weights", str(run), "--data", "synthetic", "--batch-size", "8",
                     "--batches", "1", "--no-progress"]) == 0
    # a finished run exports on --resume --export from its checkpoint
    other = tmp_path / "later"
    _run(other, **{**KW, "train": "FC1", "steps": 2})
    assert not (other / "model.safetensors").exists()
    _run(other, **{**KW, "train": "FC1", "steps": 2}, resume=True, export=True)
    assert (other / "model.safetensors").exists()
