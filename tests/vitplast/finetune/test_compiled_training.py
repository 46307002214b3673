"""`vitplast finetune --compile`: the monitored compiled run records what the eager run records, in one
process and under torchrun with 2 CPU processes (DDP + compile, gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import free_port, quiet
from vitplast.finetune import finetune
from vitplast.runs.rundir import read_jsonl

TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, data="synthetic", train="MHA",
            steps=4, batch_size=16, monitor_every=2, eval_every=4, plots=False, progress=False, seed="1",
            model_kwargs=dict(patch_size=8, depth=2, embed_dim=32, num_heads=2), reporter=quiet())


def _monitor_records(path):
    return [r for r in read_jsonl(path / "metrics.jsonl") if r["kind"] == "monitor"]


@pytest.mark.slow
def test_compiled_run_records_the_eager_numbers(tmp_path):
    finetune(**TINY, out=str(tmp_path / "eager"))
    finetune(**TINY, compile="default", out=str(tmp_path / "compiled"))
    eager, compiled = _monitor_records(tmp_path / "eager"), _monitor_records(tmp_path / "compiled")
    assert [r["iter"] for r in compiled] == [r["iter"] for r in eager] == [0, 2]
    for a, b in zip(eager, compiled, strict=True):
        assert a["pairs"] == b["pairs"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        for c, v in a["plasticity_mean"].items():
            assert b["plasticity_mean"][c] == pytest.approx(v, rel=1e-4), c


def test_compile_mode_is_validated(tmp_path):
    with pytest.raises(ValueError, match="--compile: must be one of"):
        finetune(**TINY, compile="fast", out=str(tmp_path / "x"))



@pytest.mark.slow
def test_two_process_ddp_with_compile(tmp_path):
    args = ["--model", "vit_tiny_patch16_224", "--img-size", "16", "--model-arg", "patch_size=8",
            "--model-arg", "depth=2", "--model-arg", "embed_dim=32", "--model-arg", "num_heads=2",
            "--random-init", "--data", "synthetic", "--train", "MHA", "--steps", "4", "--batch-size", "16",
            "--monitor-every", "2", "--no-plots", "--no-progress", "--seed", "1", "--compile"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "vitplast.cli", "finetune", "--out", str(tmp_path / "ddp"), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads((tmp_path / "ddp" / "summary.json").read_text())["world_size"] == 2
    mon = _monitor_records(tmp_path / "ddp")
    assert [r["iter"] for r in mon] == [0, 2]
    assert all(r["pairs"][c] == [8, 8] for r in mon for c in r["pairs"])  # 2 ranks x 4 pairs per layer
