"""The finetuning runs of `vitplast claim`: one :func:`vitplast.finetune.train_run` per (train, lr, seed).

Every run trains into its own directory ``OUT/runs/<train>-lr<lr>-s<seed>/`` (the finetune run layout:
config.json, metrics.jsonl, checkpoint.pt, summary.json) and is always called with ``resume=True``:
a finished directory (summary.json present) is loaded without training, a partial one (config.json,
no summary) continues from its last checkpoint, a new one starts. A killed `claim` therefore loses at
most the steps since each interrupted run's last checkpoint. A directory written with other options
is refused by the finetune driver (its config check), which keeps one OUT one experiment.

``jobs > 1`` trains that many runs at once in spawned processes (each with ``threads`` intra-op
threads); results do not depend on it. The workers die with the claim: on Linux the kernel kills them
when it dies (``PR_SET_PDEATHSIG``), everywhere a thread of theirs exits when their parent changes, and
every write to a run directory first checks the parent, so nothing is written after a ``kill -9`` of
the claim. Ctrl-C is the claim's to handle (the workers ignore it): it stops them, each run keeping
its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..finetune import Prepared, RunSettings, RunSpec, run_name
from ..outputs.reporter import Reporter
from ..runs.rundir import RunDir, check_parent, guard_writes

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of the claim's grid and the state of its directory when planned (``RunDir.state``:
    new, partial, finished or foreign)."""

    spec: RunSpec
    state: str


def plan_runs(out: Path, settings: RunSettings, trains: list[str], lrs: list[float], seeds: list[int]
              ) -> list[PlannedRun]:
    """Every (train, lr, seed) with its directory and state, in training order (seed-major, so an
    interrupted claim has whole seeds to show)."""
    runs = []
    for seed in seeds:
        for train in trains:
            for lr in lrs:
                path = out / "runs" / run_name(train, lr, seed)
                runs.append(PlannedRun(RunSpec(train, lr, seed, path, settings), RunDir(path).state()))
    return runs


def _worker_init(parent_pid: int) -> None:
    """First thing in a worker process: it dies with ``parent_pid`` and leaves Ctrl-C to it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        try:  # the kernel sends SIGKILL when the parent dies
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    guard_writes(parent_pid)
    check_parent()  # the parent may have died before prctl took effect
    threading.Thread(target=_watch_parent, name="vitplast-watch-parent", daemon=True).start()


def _watch_parent(period: float = 0.2) -> None:
    while True:
        time.sleep(period)
        check_parent()


def _stop_workers(pool) -> None:
    """Ends the pool's worker processes now (each run keeps its last checkpoint) and the pool."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _train_one(spec: RunSpec, prepared: Prepared, threads: int | None,
               after_step: Callable[[int], None] | None = None) -> dict:
    """One run in this process (also the body of a worker process); returns its summary."""
    import torch

    from ..finetune import train_run

    if threads:
        torch.set_num_threads(threads)
    return train_run(spec, prepared, reporter=Reporter.silent(), after_step=after_step)


def _label(run: PlannedRun) -> str:
    return run.spec.label


def train_all(runs: list[PlannedRun], prepared: Prepared, *, n_procs: int = 1, threads: int | None = None,
              progress: bool = True, after_step: Callable[[int], None] | None = None) -> list[dict]:
    """Train (or load) every run; returns the summaries in run order, each with ``"reused"`` (True when
    the run was finished before this call). ``after_step`` is passed to every run (one process only)."""
    from tqdm.auto import tqdm

    out: dict[int, dict] = {}
    for i, r in enumerate(runs):
        if r.state == "finished":
            out[i] = {**_train_one(r.spec, prepared, None), "reused": True}
    todo = [i for i in range(len(runs)) if i not in out]
    bar = tqdm(total=len(todo), desc="finetuning runs", unit="run", disable=not progress, dynamic_ncols=True)
    try:
        if n_procs <= 1 or len(todo) <= 1:
            for i in todo:
                bar.set_postfix_str(_label(runs[i]), refresh=True)
                out[i] = {**_train_one(runs[i].spec, prepared, threads, after_step), "reused": False}
                bar.update(1)
        else:
            out.update(_train_in_processes(runs, todo, prepared, n_procs, threads, bar))
    finally:
        bar.close()
    return [out[i] for i in range(len(runs))]


def _train_in_processes(runs: list[PlannedRun], todo: list[int], prepared: Prepared, n_procs: int,
                        threads: int | None, bar) -> dict[int, dict]:
    """The runs ``todo`` (indices into ``runs``) trained by ``n_procs`` spawned worker processes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    done: dict[int, dict] = {}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=n_procs, mp_context=ctx, initializer=_worker_init,
                             initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(_train_one, runs[i].spec, prepared, threads): i for i in todo}
        try:
            for fut in as_completed(futures):
                i = futures[fut]
                done[i] = {**fut.result(), "reused": False}
                bar.set_postfix_str(_label(runs[i]), refresh=False)
                bar.update(1)
        except BaseException:
            _stop_workers(pool)
            raise
    return done


def calibrate(settings: RunSettings, prepared: Prepared, trains: list[str], *, probe_steps: int,
              threads: int | None, folder: Path | None = None) -> dict:
    """Time short runs to estimate a full one: a 1-step run of the first trained component (fixed
    cost: model, data, two evaluations) and ``1 + probe_steps``-step runs of it and of ``head`` when
    listed (the cost of a step, which differs: a head-only step stops its backward at the head).
    Returns ``{"overhead_s", "step_s": {train: seconds per step}, "seconds"}``."""
    t_start = time.perf_counter()
    component = next((t for t in trains if t != "head"), trains[0])
    kinds = [component] + (["head"] if "head" in trains and component != "head" else [])
    with tempfile.TemporaryDirectory(prefix="claim-calibration-", dir=folder) as tmp:
        def timed(train: str, steps: int, name: str) -> float:
            probe = dataclasses.replace(settings, steps=steps, checkpoint_every=0, plots=False,
                                        progress=False)
            t0 = time.perf_counter()
            _train_one(RunSpec(train, 1e-4, 0, Path(tmp) / name, probe, resume=False), prepared, threads)
            return time.perf_counter() - t0

        timed(component, 1, "warm-up")  # first-time imports and allocations do not count
        overhead = timed(component, 1, "overhead")
        step_s = {t: max(0.0, (timed(t, 1 + probe_steps, f"{t}-steps") - overhead) / probe_steps)
                  for t in kinds}
    step_s = {t: step_s.get(t, step_s[component]) for t in trains}
    return {"overhead_s": overhead, "step_s": step_s, "probe_steps": probe_steps,
            "seconds": time.perf_counter() - t_start}


def estimate_seconds(runs: list[PlannedRun], calib: dict, steps: int, n_procs: int) -> float:
    """Wall time of the runs still to train, from a calibration: overhead + steps x step time each
    (a partial run counted whole), divided over ``n_procs`` processes (assumes free cores)."""
    todo = [r for r in runs if r.state != "finished"]
    total = sum(calib["overhead_s"] + steps * calib["step_s"][r.spec.train] for r in todo)
    return total / max(1, min(n_procs, len(todo) or 1))
