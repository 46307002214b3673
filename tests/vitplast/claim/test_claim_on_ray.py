"""`vitplast claim --executor ray` (and a finetune grid) on a real two-node Ray cluster started here
(``ray.cluster_utils``: a head and a second node on localhost, one CPU each), against the local
executor's result on the same grid: the same analysis and every metrics row bit for bit; a node removed
while it trains a run (the run is retried on the other node and resumes from its checkpoint); the
driver killed with SIGKILL and run again (finished runs reused)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import collecting, file_tree, pid_running, quiet
from vitplast.claim import claim

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, kills processes")]

# 4 runs (MHA, FC1, LN1, head) of about 3 s each on one core, a checkpoint every 20 of 120 steps
GRID = dict(components="MHA,FC1,LN1", optimizer="sgd", lr="3e-2", seed="0", steps=120, checkpoint_every=20,
            bootstrap=100, progress=False)
GRID_CLI = ["--optimizer", "sgd", "--components", "MHA,FC1,LN1", "--lr", "3e-2", "--seed", "0", "--steps",
            "120", "--checkpoint-every", "20", "--bootstrap", "100", "--no-progress"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "claim"
    return out, claim(out=str(out), **GRID, jobs=1, reporter=quiet())


def _metrics(out: Path) -> dict[str, str]:
    return {p.parent.name: p.read_text() for p in sorted((out / "runs").glob("*/metrics.jsonl"))}


def _lock(run: Path) -> dict | None:
    try:
        return json.loads((run / ".lock").read_text())
    except (OSError, ValueError):
        return None


def _same_as_local(res, out: Path, local) -> None:
    ref_out, ref = local
    assert res.analysis == ref.analysis
    assert [(r["train"], r["final_acc"]) for r in res.runs] == [(r["train"], r["final_acc"])
                                                                 for r in ref.runs]
    assert _metrics(out) == _metrics(ref_out) and len(_metrics(out)) == 5  # 4 runs and full finetuning


def test_a_grid_on_two_nodes_gives_the_local_result(cluster, local, tmp_path):
    said = []
    res = claim(out=str(tmp_path / "ray"), **GRID, executor="ray", ray_address=cluster.address,
                reporter=collecting(said))
    assert any(s.startswith("executor: Ray cluster of 2 node(s), 2 CPUs") for s in said)
    _same_as_local(res, tmp_path / "ray", local)


def _wait_for(predicate, timeout: float, what: str, period: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (found := predicate()) is not None:
            return found
        time.sleep(period)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_node_removed_mid_run_is_retried_and_resumes(cluster, local, tmp_path):
    from vitplast.outputs.reporter import Reporter

    out, said, result = tmp_path / "node", [], {}
    victim = next(iter(cluster.worker_nodes))

    def drive():
        result["res"] = claim(out=str(out), **GRID, executor="ray", ray_address=cluster.address,
                              reporter=Reporter(say=lambda text: said.append((time.monotonic(), text))))

    driver = threading.Thread(target=drive)
    driver.start()

    def run_on_victim():  # a run on the second node, past its first checkpoint, not finished
        for run in sorted(out.glob("runs/*")):
            held = _lock(run)
            if (held and held.get("node") == victim.node_id and (run / "checkpoint.pt").exists()
                    and not (run / "summary.json").exists()):
                return run, held
        return None

    run, held = _wait_for(run_on_victim, 120, "a run past a checkpoint on the second node")
    killed_at = time.monotonic()
    cluster.remove_node(victim)
    retry = _wait_for(lambda: (h := _lock(run)) and h["token"] != held["token"] and h or None, 60,
                      "the retry of the killed run")
    restart_s = time.monotonic() - killed_at
    driver.join(timeout=180)
    assert not driver.is_alive() and "res" in result
    retried = [(t, text) for t, text in said if text.startswith("retrying ") and "NodeDiedError" in text]
    assert len(retried) == 1, said
    print(f"\nnode death to the retry's submission: {retried[0][0] - killed_at:.2f} s; to the run's restart "
          f"on the other node: {restart_s:.2f} s (run {run.name})")
    assert retry["node"] != victim.node_id and restart_s < 30
    assert json.loads((run / "summary.json").read_text())["seconds"] is None  # resumed, not restarted
    _same_as_local(result["res"], out, local)
    cluster.add_node(num_cpus=1)  # two nodes again for what follows
    cluster.wait_for_nodes()




def test_kill_9_of_the_driver_then_the_same_command_reuses_and_resumes(cluster, local, tmp_path):
    out = tmp_path / "killed"
    argv = [sys.executable, "-m", "vitplast.cli", "claim", "--out", str(out), *GRID_CLI, "--executor", "ray",
            "--ray-address", cluster.address]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        def finished_and_partial():
            runs = sorted(out.glob("runs/*"))
            done = [r for r in runs if (r / "summary.json").exists()]
            partial = [r for r in runs if (r / "checkpoint.pt").exists() and not (r / "summary.json").exists()
                       and _lock(r)]
            return (done, partial) if done and partial else None

        _, partial = _wait_for(finished_and_partial, 180, "a finished run and a partial one")
        holders = [h["pid"] for r in partial if (h := _lock(r))]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    _wait_for(lambda: True if not any(pid_running(p) for p in holders) else None, 30, "Ray to end the tasks")
    before = file_tree(out)
    time.sleep(1.0)
    assert file_tree(out) == before  # nothing is written once the driver and its tasks are gone
    res = claim(out=str(out), **GRID, executor="ray", ray_address=cluster.address, reporter=quiet())
    assert res.plan["reused"] >= 1 and res.plan["trained"] + res.plan["reused"] == 5
    _same_as_local(res, out, local)


def test_a_finetune_grid_on_ray_gives_the_local_table(cluster, tmp_path):
    from vitplast.finetune import finetune

    grid = dict(train="MHA,head", lr="3e-2", seed="0", steps=10, monitor_every=5, threads=1, plots=False,
                progress=False, reporter=quiet())
    here = finetune(out=str(tmp_path / "here"), **grid)
    there = finetune(out=str(tmp_path / "ray"), **grid, executor="ray", ray_address=cluster.address)
    assert there.table == here.table
    for run in ("MHA-lr0.03-s0", "head-lr0.03-s0"):
        assert ((tmp_path / "ray" / run / "metrics.jsonl").read_text()
                == (tmp_path / "here" / run / "metrics.jsonl").read_text())
