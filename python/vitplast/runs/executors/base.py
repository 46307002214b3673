"""What every executor implements (`Executor`) and the one loop that drives any of them over a grid
(`run_jobs`).

An executor starts attempts of jobs and says how they ended; it keeps no schedule. The loop keeps it
(`Schedule`: which job runs next, which wait for a directory another process holds, which are retried after
their worker died) and asks the executor only three things: ``submit`` an attempt (the job, its arguments, its
resources, its token) and get a handle back; ``wait`` for some handles to end; ``cancel`` those still in
flight when the grid stops. A new executor is a module of this package with a class that does these three
things and a ``from_options`` function, and one line in `vitplast.runs.executors.registry.EXECUTORS`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Protocol

from .jobs import Job, Schedule
from .progress import GridProgress


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one run reserves: CPUs and GPUs (an executor that places runs on a cluster honours them)
    and the intra-op threads of torch in the process that trains it (None: torch's default)."""

    cpus: float = 1.0
    gpus: float = 0.0
    threads: int | None = None


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One attempt of a job: the arguments to call it with, and the token its run directory's lock
    records (``supersedes``: the tokens of the attempts before it, whose locks it takes over)."""

    job: Job
    args: tuple
    token: str
    supersedes: tuple[str, ...]
    resources: Resources


@dataclasses.dataclass(frozen=True)
class Ended:
    """How an attempt ended: ``kind`` is ``done`` (``value``: the job's result), ``busy`` (``value``: the
    lock record of the live writer holding its directory), ``failed`` (``value``: the exception the job
    raised, ``text``: its traceback) or ``crashed`` (its worker or node died; ``text``: why)."""

    kind: str
    value: Any = None
    text: str | None = None


class Executor(Protocol):
    """Where the attempts of a grid's jobs run. A context manager: entered before the first submit
    (a cluster is connected there), left when the grid is done."""

    in_process: bool  # attempts run in this process (a job's ``local_args``, e.g. callbacks, reach it)
    runs_at_once: int | None  # how many runs train at once on this machine (None: a cluster decides)
    lockstep: bool  # one rank of a process group: every rank submits the same attempts, in order
    retries: int  # times a crashed attempt is retried
    resources: Resources  # what each run reserves

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc) -> None: ...

    def describe(self) -> str | None:
        """One line saying where the runs train, or None when there is nothing to say."""

    def slots(self) -> int:
        """How many attempts may be in flight now (the loop submits up to that many)."""

    def submit(self, attempt: Attempt) -> Any:
        """Starts ``attempt``; returns a handle (hashable) that `wait` reports once."""

    def wait(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, Ended]]:
        """The handles among ``handles`` that ended within ``timeout`` seconds, with how."""

    def cancel(self, handle: Any) -> None:
        """Stops an attempt in flight (the grid is stopping); its run keeps its last checkpoint."""

    def nodes(self, handles: Sequence[Any]) -> list[str]:
        """The node (or host) of every attempt among ``handles`` that is training now."""


class ExecutorBase:
    """What most executors share: nothing to connect to, nothing to say, no lockstep, as many attempts
    in flight as runs train at once here."""

    in_process = False
    runs_at_once: int | None = None
    lockstep = False
    retries = 3
    resources = Resources()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def describe(self) -> str | None:
        return None

    def slots(self) -> int:
        return self.runs_at_once or 1


def run_jobs(executor: Executor, jobs: Sequence[Job], progress: GridProgress) -> list[Any]:
    """Every job's result in job order, each job attempted through ``executor`` (a crashed attempt
    retried up to ``executor.retries`` times, resuming from its checkpoint); `GridFailed`
    after the others when some failed. Ctrl-C (or any exception) cancels the attempts in flight. A
    lockstep executor's jobs run in order, nothing waited for (every rank must take the same steps)."""
    sched = Schedule(jobs, progress, executor.retries)

    def attempt(i: int) -> Attempt:  # its next attempt: the first, or a retry naming those before it
        return Attempt(sched.jobs[i], sched.args(i), sched.token(i), sched.supersedes(i), executor.resources)

    if executor.lockstep:
        for i in range(len(sched.jobs)):
            for _, ended in executor.wait([executor.submit(attempt(i))], timeout=0.0):
                sched.record(i, ended)
        return sched.result()
    flying: dict[Any, int] = {}
    try:
        while not sched.finished:
            while len(flying) < executor.slots() and (i := sched.take()) is not None:
                flying[executor.submit(attempt(i))] = i
            if not flying:
                time.sleep(sched.wake_in())
                continue
            for handle, ended in executor.wait(list(flying), timeout=sched.wake_in()):
                sched.record(flying.pop(handle), ended)
            running = executor.nodes(list(flying))
            progress.update(len(running), running)
    except BaseException:
        for handle in flying:
            executor.cancel(handle)
        raise
    return sched.result()
