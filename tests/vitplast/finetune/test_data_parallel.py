"""`vitplast finetune` under torchrun with 2 CPU processes (gloo): metrics and plasticity combined."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import free_port, quiet
from vitplast.finetune import finetune
from vitplast.runs.rundir import read_jsonl

pytestmark = pytest.mark.slow  # see the Makefile's test-fast

ARGS = ["--model", "vit_tiny_patch16_224", "--random-init", "--img-size", "16", "--model-arg", "patch_size=8",
        "--model-arg", "depth=2", "--model-arg", "embed_dim=32", "--model-arg", "num_heads=2",
        "--data", "synthetic", "--train", "MHA", "--steps", "4", "--batch-size", "32",
        "--monitor-every", "2", "--eval-every", "2", "--no-plots", "--no-progress", "--seed", "1"]



def test_two_process_ddp_combines_ranks(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "vitplast.cli", "finetune", "--out", str(tmp_path / "ddp"), *ARGS]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["world_size"] == 2
    recs = read_jsonl(tmp_path / "ddp" / "metrics.jsonl")
    mon = [r for r in recs if r["kind"] == "monitor"]
    assert [r["iter"] for r in mon] == [0, 2]  # written once (rank 0), not once per rank
    # each rank pairs the halves of its 16 sequences (8 pairs): combined over ranks, 16 per layer
    assert all(r["pairs"][c] == [16, 16] for r in mon for c in r["pairs"])

    # the same global batches on one process: the evaluation (split over ranks and summed) and the
    # loss at iteration 0 (mean of equal-size rank means) must agree; pairs differ, so plasticity
    # agrees only roughly
    opts = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, data="synthetic", train="MHA",
                steps=4, batch_size=32, monitor_every=2, eval_every=2, plots=False, progress=False, seed="1",
                model_kwargs=dict(patch_size=8, depth=2, embed_dim=32, num_heads=2),
                out=str(tmp_path / "one"), reporter=quiet())
    finetune(**opts)
    one = read_jsonl(tmp_path / "one" / "metrics.jsonl")
    e_ddp = [r for r in recs if r["kind"] == "eval"]
    e_one = [r for r in one if r["kind"] == "eval"]
    assert e_ddp[0]["acc"] == e_one[0]["acc"]
    assert e_ddp[0]["loss"] == pytest.approx(e_one[0]["loss"], rel=1e-5)
    m_one = [r for r in one if r["kind"] == "monitor"]
    assert mon[0]["loss"] == pytest.approx(m_one[0]["loss"], rel=1e-5)
    for c, v in m_one[0]["plasticity_mean"].items():
        assert mon[0]["plasticity_mean"][c] == pytest.approx(v, rel=0.5)
