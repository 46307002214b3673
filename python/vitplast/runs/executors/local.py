"""The local executor: a grid's runs on this machine, one after another in this process (``jobs=1``,
`InProcessExecutor`) or ``jobs`` at a time in spawned worker processes (each with ``threads``
intra-op threads, `ProcessExecutor`); under torchrun, every rank runs the same runs in order
(`LockstepExecutor`). `from_options` picks one.

The workers die with the driver: on Linux the kernel kills them when it dies (``PR_SET_PDEATHSIG``),
everywhere a thread of theirs exits when their parent changes, and every write to a run directory
first checks the parent, so nothing is written after a ``kill -9`` of the driver. Ctrl-C and a hangup
are the driver's to handle (the workers ignore them, from their first instruction: they start with
both blocked): it stops them, each run keeping its last checkpoint. A worker that dies (killed, out
of memory) breaks the pool: a new pool retries the runs it held, which resume from their checkpoints.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ...options.fields import OptionError
from ...runtime.stops import clean_worker_exit, die_with_parent, signals_held
from ..rundir import check_parent, guard_writes
from .base import Attempt, Ended, ExecutorBase, Resources
from .jobs import run_attempt


def _worker_init(parent_pid: int) -> None:
    """First thing in a worker process: it dies with ``parent_pid`` and leaves Ctrl-C and hangups to it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()  # the kernel sends SIGKILL when the parent dies; SIGHUP ignored
    clean_worker_exit()  # SIGTERM from the driver: exit handlers run, no semaphore leaks
    guard_writes(parent_pid)
    check_parent()  # the parent may have died before prctl took effect
    threading.Thread(target=_watch_parent, name="vitplast-watch-parent", daemon=True).start()


def _watch_parent(period: float = 0.2) -> None:
    while True:
        time.sleep(period)
        check_parent()


def from_options(opts, *, jobs: int, threads: int | None, device_type: str, lockstep: bool = False):
    """The local executor of ``jobs`` processes (``lockstep``: this process is one rank of a torchrun
    group)."""
    if lockstep:
        return LockstepExecutor()
    if jobs <= 1:
        return InProcessExecutor(retries=opts.retries)
    return ProcessExecutor(jobs=jobs, threads=threads, retries=opts.retries)


def check_options(opts) -> None:
    """This executor takes none of Ray's options."""
    for name in ("ray_address", "cpus_per_run", "gpus_per_run"):
        if getattr(opts, name) is not None:
            raise OptionError(f"--{name.replace('_', '-')} only applies to --executor ray")


@dataclasses.dataclass(eq=False)  # a handle: hashed by identity
class Finished:
    """The handle of an attempt that ran in this process: how it ended."""

    ended: Ended


class InProcessExecutor(ExecutorBase):
    """One run at a time, in this process (a job's ``local_args``, such as callbacks, reach it)."""

    in_process = True
    runs_at_once = 1

    def __init__(self, retries: int = 3) -> None:
        self.retries = retries

    def submit(self, attempt: Attempt) -> Finished:
        """Runs the attempt now; its handle holds how it ended (a KeyboardInterrupt, or a test's stop
        that is no Exception, ends the grid)."""
        job = attempt.job
        try:
            return Finished(Ended(*run_attempt(job.fn, attempt.args + job.local_args, attempt.token,
                                               attempt.supersedes)))
        except Exception as exc:  # the grid goes on
            return Finished(Ended("failed", exc))

    def wait(self, handles: Sequence[Finished], timeout: float) -> list[tuple[Finished, Ended]]:
        return [(h, h.ended) for h in handles]

    def cancel(self, handle: Finished) -> None:
        return None

    def nodes(self, handles: Sequence[Any]) -> list[str]:
        return []


class LockstepExecutor(InProcessExecutor):
    """One rank of a process group (torchrun) whose every rank runs the same jobs together: one after
    another, in order, nothing waited for or caught (an error ends the grid on every rank alike)."""

    lockstep = True

    def submit(self, attempt: Attempt) -> Finished:
        return Finished(Ended("done", attempt.job.fn(*attempt.args, *attempt.job.local_args)))


class ProcessExecutor(ExecutorBase):
    """``jobs`` runs at a time in spawned worker processes of this machine, each with ``threads``
    intra-op threads. A worker that dies breaks the pool: the runs it held end as crashed (the loop
    retries them) and the next submit starts a new pool."""

    def __init__(self, jobs: int = 2, threads: int | None = None, retries: int = 3) -> None:
        self.jobs, self.runs_at_once, self.retries = jobs, jobs, retries
        self.resources = Resources(threads=threads)
        self.pool = None

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def submit(self, attempt: Attempt):
        with signals_held():  # a worker started here ignores Ctrl-C and hangups from its start
            if self.pool is None:
                spawn = multiprocessing.get_context("spawn")
                self.pool = ProcessPoolExecutor(self.jobs, spawn, _worker_init, initargs=(os.getpid(),))
            return self.pool.submit(run_attempt, attempt.job.fn, attempt.args, attempt.token,
                                    attempt.supersedes, attempt.resources.threads)

    def wait(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, Ended]]:
        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        ended, broken = [], False
        for fut in done:
            try:
                ended.append((fut, Ended(*fut.result())))
            except BrokenProcessPool:
                broken = True
            except Exception as exc:
                ended.append((fut, Ended("failed", exc)))
        if broken:  # a worker died: every run the pool held ends, and is retried in a new pool
            ended += [(fut, Ended("crashed", text="a worker process of this machine died"))
                      for fut in handles if all(fut is not h for h, _ in ended)]
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        return ended

    def cancel(self, handle) -> None:
        """Ends the worker processes now (each run keeps its last checkpoint) and the pool."""
        if self.pool is not None:
            for proc in list((getattr(self.pool, "_processes", None) or {}).values()):
                if proc.is_alive():
                    proc.terminate()
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def nodes(self, handles: Sequence[Any]) -> list[str]:
        return ["local"] * sum(fut.running() for fut in handles)
