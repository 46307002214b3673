"""The local executor: a grid's runs on this machine, one after another in this process (``jobs=1``)
or ``jobs`` at a time in spawned worker processes (each with ``threads`` intra-op threads).

The workers die with the driver: on Linux the kernel kills them when it dies (``PR_SET_PDEATHSIG``),
everywhere a thread of theirs exits when their parent changes, and every write to a run directory
first checks the parent, so nothing is written after a ``kill -9`` of the driver. Ctrl-C is the
driver's to handle (the workers ignore it): it stops them, each run keeping its last checkpoint. A
worker that dies (killed, out of memory) breaks the pool: a new pool retries the runs it held, which
resume from their checkpoints.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..rundir import check_parent, guard_writes
from .jobs import Job, Schedule, run_attempt
from .progress import GridProgress

PR_SET_PDEATHSIG = 1  # linux/prctl.h


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


class LocalExecutor:
    """Runs on this machine: in this process when ``jobs == 1`` (a job may then carry closures), else
    in ``jobs`` spawned processes. ``lockstep``: this process is one rank of a process group (torchrun)
    whose every rank runs the same jobs together: one after another, in order, nothing waited for or
    caught (an error ends the grid on every rank alike)."""

    name = "local"

    def __init__(self, jobs: int = 1, threads: int | None = None, retries: int = 3,
                 lockstep: bool = False) -> None:
        self.jobs, self.threads, self.retries, self.lockstep = jobs, threads, retries, lockstep

    @property
    def in_process(self) -> bool:
        return self.jobs <= 1

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def run(self, jobs: Sequence[Job], progress: GridProgress) -> list[Any]:
        """Every job's result in order; :class:`~.jobs.GridFailed` after the others when some failed."""
        sched = Schedule(jobs, progress, self.retries)
        if self.lockstep:
            for i, job in enumerate(sched.jobs):
                sched.done(i, job.fn(*job.args))
        elif self.in_process:
            self._run_here(sched)
        else:
            self._run_in_processes(sched)
        return sched.result()

    def _run_here(self, sched: Schedule) -> None:
        while not sched.finished:
            i = sched.take()
            if i is None:
                time.sleep(sched.wake_in())
                continue
            sched.progress.update(1, ["local"])
            job = sched.jobs[i]
            try:
                kind, value = run_attempt(job.fn, sched.args(i), sched.token(i), sched.supersedes(i))
            except Exception as exc:  # the grid goes on; KeyboardInterrupt (and a test's stop) end it
                sched.failed(i, exc)
            else:
                sched.outcome(i, kind, value)
            sched.progress.update(0, ["local"])

    def _run_in_processes(self, sched: Schedule) -> None:
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        ctx = multiprocessing.get_context("spawn")
        while not sched.finished:
            pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx, initializer=_worker_init,
                                       initargs=(os.getpid(),))
            flying: dict = {}
            try:
                while not sched.finished:
                    while len(flying) < self.jobs and (i := sched.take()) is not None:
                        job = sched.jobs[i]
                        flying[pool.submit(run_attempt, job.fn, sched.args(i), sched.token(i),
                                           sched.supersedes(i), self.threads)] = i
                    if not flying:
                        time.sleep(sched.wake_in())
                        continue
                    done, _ = wait(flying, timeout=sched.wake_in(), return_when=FIRST_COMPLETED)
                    sched.progress.update(sum(f.running() for f in flying), ["local"])
                    for fut in done:
                        i = flying.pop(fut)
                        try:
                            sched.outcome(i, *fut.result())
                        except BrokenProcessPool:
                            flying[fut] = i
                            raise
                        except Exception as exc:
                            sched.failed(i, exc)
            except BrokenProcessPool:  # a worker died: retry what the pool held, in a new one
                for i in flying.values():
                    sched.crashed(i, "a worker process of this machine died")
                pool.shutdown(wait=True, cancel_futures=True)
                continue
            except BaseException:
                _stop_workers(pool)
                raise
            pool.shutdown(wait=True)
