"""What an executor runs and how it keeps count: a `Job` (one run of a grid: a function, its arguments, its
run directory), a `Schedule` (which job runs next, which wait for a directory another process holds, which are
retried after their worker died, which failed) and the failure of a grid (`GridFailed`).

Every attempt of a job carries a token (``SESSION-JOB-ATTEMPT``) that the run directory's lock records
(`vitplast.runs.lock.attempt`). A retry names the tokens of the attempts before it, so it takes their locks
over at once, wherever they ran; a directory held by anyone else is waited for.
"""

from __future__ import annotations

import collections
import dataclasses
import secrets
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..lock import RunBusy, RunLock, attempt, describe
from .progress import GridProgress

USAGE_ERRORS = (ValueError, FileNotFoundError, ImportError)  # bad input, not a crash (exit status 2)
BUSY_POLL_S = (1.0, 15.0)  # first and longest wait between two looks at a directory another process holds


@dataclasses.dataclass(frozen=True)
class Job:
    """One run of a grid: ``fn(*args)`` trains it into ``directory`` and returns its summary.

    ``fn`` must be a module-level function and ``args`` must pickle (an executor may ship them to
    another process); ``retry_args`` are the arguments of a retry (e.g. the spec with ``resume=True``),
    by default ``args``; ``local_args`` are appended when the job runs in this process (objects that
    cannot travel, such as a reporter or a callback)."""

    fn: Callable[..., Any]
    args: tuple
    directory: Path
    label: str
    retry_args: tuple | None = None
    local_args: tuple = ()

    @property
    def log(self) -> Path:
        """Where the driver writes what made this job fail (beside its directory)."""
        return self.directory.with_name(self.directory.name + ".log")


@dataclasses.dataclass(frozen=True)
class Failure:
    job: Job
    error: str  # the first line of what was raised
    usage: bool  # bad input (a ValueError, a missing file or package), not a crash

    def line(self) -> str:
        return f"{self.job.label} ({self.job.directory}; log {self.job.log}): {self.error}"


class GridFailed(RuntimeError):
    """Runs of a grid failed (every other run was trained); ``failures`` names them."""

    def __init__(self, failures: Sequence[Failure], total: int) -> None:
        self.failures = list(failures)
        super().__init__(f"{len(failures)} of {total} runs failed: " + "; ".join(f.line() for f in failures))


class GridRefused(GridFailed, ValueError):
    """Runs of a grid failed on their input (exit status 2, like any bad input)."""


def run_attempt(fn: Callable[..., Any], args: tuple, token: str, supersedes: tuple[str, ...],
                threads: int | None = None, node: str | None = None) -> tuple[str, Any]:
    """One attempt of a job, in whatever process runs it: ``("done", fn(*args))``, or ``("busy",
    holder)`` when its directory is held by a live writer. ``threads``: intra-op threads of torch."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    with attempt(token, supersedes, node):
        try:
            return "done", fn(*args)
        except RunBusy as exc:
            return "busy", exc.holder


class Schedule:
    """The state of one executor's pass over ``jobs`` (indices into it): ready, waiting for a directory
    another process holds, running, done, failed; retries and their tokens."""

    def __init__(self, jobs: Sequence[Job], progress: GridProgress, retries: int) -> None:
        self.jobs, self.progress, self.retries = list(jobs), progress, retries
        self.session = secrets.token_hex(4)
        self.attempts = [0] * len(self.jobs)
        self.ready = collections.deque(range(len(self.jobs)))
        self.waiting: dict[int, tuple[float, float]] = {}  # job -> (next look, delay)
        self.results: dict[int, Any] = {}
        self.failures: dict[int, Failure] = {}

    # -- what runs next ------------------------------------------------------------------------------
    def token(self, i: int) -> str:
        return f"{self.session}-{i}-{self.attempts[i]}"

    def supersedes(self, i: int) -> tuple[str, ...]:
        return tuple(f"{self.session}-{i}-{a}" for a in range(self.attempts[i]))

    def args(self, i: int) -> tuple:
        job = self.jobs[i]
        return job.args if self.attempts[i] == 0 or job.retry_args is None else job.retry_args

    def take(self) -> int | None:
        """The next job to start (a waiting one whose time has come first), or None. A job whose
        directory a live writer holds goes (back) to waiting without being shipped."""
        now = time.monotonic()
        due = [i for i, (t, _) in self.waiting.items() if t <= now]
        while due or self.ready:
            i = due.pop(0) if due else self.ready.popleft()
            holder = RunLock(self.jobs[i].directory).holder(self.supersedes(i))
            if holder is None:
                self.waiting.pop(i, None)
                return i
            self.busy(i, holder)
        return None

    def wake_in(self) -> float:
        """Seconds until a waiting job is due (1 s at most: the caller's poll)."""
        if not self.waiting:
            return 1.0
        return max(0.05, min(1.0, min(t for t, _ in self.waiting.values()) - time.monotonic()))

    @property
    def finished(self) -> bool:
        return len(self.results) + len(self.failures) == len(self.jobs)

    # -- what happened -------------------------------------------------------------------------------
    def busy(self, i: int, holder: dict) -> None:
        """Job ``i``'s directory is held by a live writer: look again later."""
        _, delay = self.waiting.get(i, (0.0, BUSY_POLL_S[0] / 1.5))
        delay = min(BUSY_POLL_S[1], delay * 1.5)
        if i not in self.waiting:
            self.progress.waiting(self.jobs[i], describe(holder))
        self.waiting[i] = (time.monotonic() + delay, delay)

    def record(self, i: int, ended) -> None:
        """How an attempt of job ``i`` ended (a `vitplast.runs.executors.base.Ended`): what it returned
        (`run_attempt`: done, or busy: `busy`); failed, when job ``i`` raised ``ended.value``
        (``ended.text``: its traceback as the worker formatted it); or crashed, when its worker or node
        died: retried (resuming from its checkpoint) while retries last."""
        job, why = self.jobs[i], ended.text or ""
        if ended.kind == "busy":
            self.busy(i, ended.value)
        elif ended.kind == "failed":
            exc = ended.value
            self._log(job, why or "".join(traceback.format_exception(exc)))
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            self._fail(i, f"{type(exc).__name__}: {first}"[:400], usage=isinstance(exc, USAGE_ERRORS))
        elif ended.kind == "crashed":
            self._log(job, f"attempt {self.attempts[i] + 1} ended: its worker died ({why})\n")
            if self.attempts[i] < self.retries:
                self.attempts[i] += 1
                self.progress.retried(job, why, self.attempts[i])
                self.ready.appendleft(i)
            else:
                self._fail(i, f"its worker died {self.attempts[i] + 1} times (--retries {self.retries}); "
                              f"last: {why}", usage=False)
        else:  # done
            self.results[i] = ended.value
            self.waiting.pop(i, None)
            self.progress.finished(job)
            job.log.unlink(missing_ok=True)  # an earlier failure, now trained

    def _fail(self, i: int, error: str, usage: bool) -> None:
        self.failures[i] = failure = Failure(self.jobs[i], error, usage)
        self.progress.failed(failure)

    def _log(self, job: Job, text: str) -> None:
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with open(job.log, "a") as f:
            f.write(f"--- {job.label} ({job.directory}), {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n{text}")

    def result(self) -> list[Any]:
        """Every job's result in job order, or `GridFailed` naming those that failed."""
        if self.failures:
            failures = [self.failures[i] for i in sorted(self.failures)]
            raise (GridRefused if all(f.usage for f in failures) else GridFailed)(failures, len(self.jobs))
        return [self.results[i] for i in range(len(self.jobs))]
