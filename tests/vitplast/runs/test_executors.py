"""The executors of a grid, on jobs that are plain functions (runs/ knows nothing of what they train):
results in job order whatever the executor; a failed job named with its directory and log while the
others finish; a directory another process holds waited for, not trained twice; a worker that dies
retried; ``--shard I/N`` slices and the SLURM array default; the executor options' checks."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest
from helpers import collecting
from vitplast.options.fields import OptionError, resolve
from vitplast.runs.executors import (
    ExecutorOptions,
    GridFailed,
    GridProgress,
    GridRefused,
    InProcessExecutor,
    Job,
    ProcessExecutor,
    Shard,
    run_jobs,
    shard_from_env,
)
from vitplast.runs.lock import RunLock


def square(directory: str, x: int) -> int:
    """A job: writes its directory, returns x squared."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    RunLock(directory).acquire().release()
    return x * x


def refuse(directory: str, x: int) -> int:
    raise ValueError(f"job {x}: bad input")


def die_once(directory: str, x: int) -> int:
    """Kills its worker process the first time (a marker remembers), then works."""
    marker = Path(directory) / "died"
    if not marker.exists():
        Path(directory).mkdir(parents=True, exist_ok=True)
        marker.write_text("1")
        os._exit(9)
    return x * x


def _jobs(tmp_path, fns):
    return [Job(fn, (str(tmp_path / f"r{i}"), i), tmp_path / f"r{i}", f"run {i}") for i, fn in enumerate(fns)]


def _progress(said=None):
    return GridProgress(collecting(said if said is not None else []), total=3, wanted=False)


def test_in_process_results_in_order_and_failures_named_after_the_others(tmp_path):
    said = []
    jobs = _jobs(tmp_path, [square, refuse, square])
    with pytest.raises(GridRefused) as exc:
        run_jobs(InProcessExecutor(), jobs, _progress(said))
    text = str(exc.value)
    assert "1 of 3 runs failed: run 1" in text and str(tmp_path / "r1") in text
    assert str(tmp_path / "r1.log") in text and "ValueError: job 1: bad input" in text
    assert "Traceback" in (tmp_path / "r1.log").read_text()  # the whole traceback in the log
    assert (tmp_path / "r2").is_dir()  # the grid went on
    assert any(s.startswith("failed: run 1") for s in said)
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, GridFailed)  # exit status 2
    assert run_jobs(InProcessExecutor(), _jobs(tmp_path, [square, square, square]), _progress()) == [0, 1, 4]


@pytest.mark.slow  # 2-6 s: make test-fast stays under 2 minutes; CI runs it
def test_a_directory_another_writer_holds_is_waited_for(tmp_path):
    held = RunLock(tmp_path / "r0")
    (tmp_path / "r0").mkdir()
    held.acquire()  # another writer (here: this process) holds run 0
    threading.Timer(1.5, held.release).start()
    said, t0 = [], time.monotonic()
    jobs = _jobs(tmp_path, [square, square, square])
    assert run_jobs(InProcessExecutor(), jobs, _progress(said)) == [0, 1, 4]
    assert time.monotonic() - t0 >= 1.5
    assert any("run 0: " in s and "is held by process" in s and "waiting" in s for s in said)
    assert (tmp_path / "r1").is_dir() and (tmp_path / "r2").is_dir()


@pytest.mark.slow
def test_processes_give_the_same_results_and_retry_a_dead_worker(tmp_path):
    said = []
    progress = _progress(said)
    jobs = _jobs(tmp_path, [square, die_once, square])
    assert run_jobs(ProcessExecutor(jobs=2, threads=1), jobs, progress) == [0, 1, 4]
    assert progress.retries >= 1 and any(s.startswith("retrying run 1") for s in said)
    assert not (tmp_path / "r1.log").exists()  # trained in the end: no failure left to read
    with pytest.raises(GridFailed, match="its worker died 1 times"):
        run_jobs(ProcessExecutor(jobs=2, retries=0), _jobs(tmp_path / "again", [die_once, square, square]),
                 _progress())


def test_shards_slice_the_list_once_each():
    items = list(range(11))
    slices = [Shard(i, 3).select(items) for i in (1, 2, 3)]
    assert slices[0] == [0, 3, 6, 9] and sorted(sum(slices, [])) == items
    assert Shard.parse(" 2/3 ") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"
    for bad in ("0/3", "4/3", "1/0", "2", "a/b", "1/2/3"):
        with pytest.raises(ValueError, match="I/N"):
            Shard.parse(bad)


def test_the_shard_of_a_slurm_array_task():
    assert shard_from_env({}) is None
    assert shard_from_env({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4"}) == Shard(1, 4)
    env = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_STEP": "2",
           "SLURM_ARRAY_TASK_COUNT": "4"}  # --array=1-7:2
    assert shard_from_env(env) == Shard(4, 4)
    with pytest.raises(ValueError, match="--shard"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "4"})


def test_executor_options_are_checked(monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)

    def opts(**kw):
        o = resolve(ExecutorOptions, kw)
        o.validate_executor()
        return o

    assert opts().executor == "local" and opts().shard is None
    assert opts(shard="2/5").shard == Shard(2, 5)
    for kw, message in [(dict(ray_address="auto"), "--ray-address only applies to --executor ray"),
                        (dict(gpus_per_run=1.0), "--gpus-per-run only applies"),
                        (dict(shard="1/2", analyse_only=True), "--analyse-only analyses the whole grid"),
                        (dict(jobs=10_000), "at most one run per core")]:
        with pytest.raises(OptionError, match=message):
            opts(**kw)
    with pytest.raises(OptionError, match="--shard: expected I/N"):
        opts(shard="3/2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    assert opts().shard == Shard(2, 2) and opts(shard="none").shard is None
    assert opts(analyse_only=True).shard is None  # the final pass of an array analyses everything


def test_a_missing_ray_is_one_line_naming_the_extra(monkeypatch, tmp_path, capsys):
    from vitplast.cli import main

    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # `import ray` fails as when not installed
    rc = main(["claim", "--out", str(tmp_path / "o"), "--executor", "ray", "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1, err
    assert "--executor ray: Ray is not installed" in err[0]
    assert "pip install 'vitplast-kernels[ray]'" in err[0]
    assert not (tmp_path / "o").exists()


def test_without_an_address_ray_starts_its_own_instance(monkeypatch):
    """No --ray-address: a Ray of the command's own (``address="local"``), never the cluster started last
    on this machine (ray.init's default, which another job, a test's cluster, may stop meanwhile: this
    process, its driver, is then killed), and it is shut down after."""
    import types

    from vitplast.runs.executors.ray_tasks import RayExecutor

    calls = []
    fake = types.SimpleNamespace(
        is_initialized=lambda: False, init=lambda **kw: calls.append(("init", kw["address"])),
        nodes=lambda: [{"Alive": True, "Resources": {"CPU": 2.0}}], shutdown=lambda: calls.append("shutdown"))
    monkeypatch.setitem(__import__("sys").modules, "ray", fake)
    with RayExecutor(None, cpus=1, gpus=0, retries=0, threads=1):
        assert calls == [("init", "local")]
    assert calls[-1] == "shutdown"
    calls.clear()
    with RayExecutor("auto", cpus=1, gpus=0, retries=0, threads=1):  # auto: the one `ray start` made
        assert calls == [("init", "auto")]


def test_the_thread_pool_executor_of_the_contributing_notes_runs_a_grid(tmp_path, monkeypatch):
    """DEVELOPERS.md's example executor, registered as its one line says, runs jobs like the others."""
    import re
    import sys
    import types

    from vitplast.runs.executors import registry

    notes = (Path(__file__).resolve().parents[3] / "DEVELOPERS.md").read_text()
    code = re.search(r"```python\n(.*?)```", notes, re.S).group(1)
    module = types.ModuleType("vitplast.runs.executors.threads")
    module.__package__ = "vitplast.runs.executors"
    exec(compile(code, "DEVELOPERS.md", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry.EXECUTORS, "threads", module.__name__)
    opts = resolve(ExecutorOptions, {})
    executor = registry.make_executor(dataclasses.replace(opts, executor="threads"), jobs=2, threads=None,
                                      device_type="cpu")
    with executor:
        assert run_jobs(executor, _jobs(tmp_path, [square, square, square]), _progress()) == [0, 1, 4]
