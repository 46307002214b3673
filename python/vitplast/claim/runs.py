"""The finetuning runs of `vitplast claim`: one `vitplast.finetune.finetune` call per (train, lr, seed).

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

import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..runtime.distributed import silent
from ..runs.rundir import CONFIG, SUMMARY, check_parent, guard_writes
from ..finetune import run_name

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def run_state(path: Path) -> str:
    """``"finished"`` (summary.json), ``"partial"`` (config.json only), ``"new"`` or ``"foreign"``."""
    if (path / SUMMARY).exists():
        return "finished"
    if (path / CONFIG).exists():
        return "partial"
    if path.exists() and any(path.iterdir()):
        return "foreign"
    return "new"


def plan_runs(out: Path, trains: list[str], lrs: list[float], seeds: list[int]) -> list[dict]:
    """Every (train, lr, seed) with its directory and state, in training order (seed-major, so an
    interrupted claim has whole seeds to show)."""
    jobs = []
    for seed in seeds:
        for train in trains:
            for lr in lrs:
                path = out / "runs" / run_name(train, lr, seed)
                jobs.append({"train": train, "lr": lr, "seed": seed, "path": path, "state": run_state(path)})
    return jobs


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


def _finetune_one(opts: dict, threads: int | None) -> dict:
    """One run in this process (also the body of a worker process); returns its summary."""
    import torch

    from ..finetune import finetune

    if threads:
        torch.set_num_threads(threads)
    return finetune(**{**opts, "_say": silent})["runs"][0]


def run_options(base: dict, job: dict) -> dict:
    return {**base, "train": job["train"], "lr": str(job["lr"]), "seed": str(job["seed"]),
            "out": str(job["path"]), "resume": True}


def train_all(jobs: list[dict], base: dict, *, n_procs: int = 1, threads: int | None = None,
              progress: bool = True, stop_after: int | None = None) -> list[dict]:
    """Train (or load) every job; returns the summaries in job order, each with ``"reused"`` (True when
    the run was finished before this call). ``stop_after`` is the driver's kill-simulation hook,
    passed to every run (one process only)."""
    from tqdm.auto import tqdm

    todo = [j for j in jobs if j["state"] != "finished"]
    out: dict[int, dict] = {}
    for i, j in enumerate(jobs):
        if j["state"] == "finished":
            out[i] = {**_finetune_one(run_options(base, j), None), "reused": True}
    bar = tqdm(total=len(todo), desc="finetuning runs", unit="run", disable=not progress, dynamic_ncols=True)
    extra = {} if stop_after is None else {"_stop_after": stop_after}
    try:
        if n_procs <= 1 or len(todo) <= 1:
            for i, j in enumerate(jobs):
                if i in out:
                    continue
                bar.set_postfix_str(f"{j['train']} lr={j['lr']:g} seed={j['seed']}", refresh=True)
                out[i] = {**_finetune_one({**run_options(base, j), **extra}, threads), "reused": False}
                bar.update(1)
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=n_procs, mp_context=ctx, initializer=_worker_init,
                                     initargs=(os.getpid(),)) as pool:
                futures = {pool.submit(_finetune_one, run_options(base, j), threads): i
                           for i, j in enumerate(jobs) if i not in out}
                try:
                    for fut in as_completed(futures):
                        i = futures[fut]
                        out[i] = {**fut.result(), "reused": False}
                        j = jobs[i]
                        bar.set_postfix_str(f"{j['train']} lr={j['lr']:g} seed={j['seed']}", refresh=False)
                        bar.update(1)
                except BaseException:
                    _stop_workers(pool)
                    raise
    finally:
        bar.close()
    return [out[i] for i in range(len(jobs))]


def calibrate(base: dict, trains: list[str], *, probe_steps: int, threads: int | None,
              folder: Path | None = None) -> dict:
    """Time short runs to estimate a full one: a 1-step run of the first trained component (fixed
    cost: model, data, two evaluations) and ``1 + probe_steps``-step runs of it and of ``head`` when
    listed (the cost of a step, which differs: a head-only step stops its backward at the head).
    Returns ``{"overhead_s", "step_s": {train: seconds per step}, "seconds"}``."""
    t_start = time.perf_counter()
    component = next((t for t in trains if t != "head"), trains[0])
    kinds = [component] + (["head"] if "head" in trains and component != "head" else [])
    with tempfile.TemporaryDirectory(prefix="claim-calibration-", dir=folder) as tmp:
        def timed(train: str, steps: int, name: str) -> float:
            opts = {**base, "train": train, "lr": str(1e-4), "seed": "0", "steps": steps,
                    "checkpoint_every": 0, "plots": False, "progress": False, "resume": False,
                    "out": os.path.join(tmp, name)}
            t0 = time.perf_counter()
            _finetune_one(opts, threads)
            return time.perf_counter() - t0

        timed(component, 1, "warm-up")  # first-time imports and allocations do not count
        overhead = timed(component, 1, "overhead")
        step_s = {t: max(0.0, (timed(t, 1 + probe_steps, f"{t}-steps") - overhead) / probe_steps)
                  for t in kinds}
    step_s = {t: step_s.get(t, step_s[component]) for t in trains}
    return {"overhead_s": overhead, "step_s": step_s, "probe_steps": probe_steps,
            "seconds": time.perf_counter() - t_start}


def estimate_seconds(jobs: list[dict], calib: dict, steps: int, n_procs: int) -> float:
    """Wall time of the jobs still to train, from a calibration: overhead + steps x step time each
    (a partial run counted whole), divided over ``n_procs`` processes (assumes free cores)."""
    todo = [j for j in jobs if j["state"] != "finished"]
    total = sum(calib["overhead_s"] + steps * calib["step_s"][j["train"]] for j in todo)
    return total / max(1, min(n_procs, len(todo) or 1))
