"""The one driver of a grid of runs, used by ``vitplast finetune`` and ``vitplast claim``: plan (the
command lists its `GridRun` objects) -> filter (this process's ``--shard``, the runs finished
before, which are loaded; a directory another process holds is waited for by the executor's loop) ->
execute (through the executor the options name) -> collect (every summary in run order).

Where a grid runs is a `GridSession`: its process group (torchrun: every rank takes the same
steps), the intra-op threads of the runs trained in this process, and its reporter (silent on ranks
other than 0). The refusals and messages every grid shares live here: ``--analyse-only`` with runs not
finished, and the line a ``--shard`` ends with. The driver knows nothing of what a run trains: a run
is a module-level function, its arguments and its directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..outputs.reporter import Reporter
from ..runtime.device import resolve_device
from ..runtime.distributed import DistContext, init_distributed
from .executors import GridProgress, Job, make_executor, run_jobs
from .executors.options import ExecutorOptions
from .rundir import RunDir


@dataclasses.dataclass(frozen=True)
class GridRun(Job):
    """One run of a grid: the `Job` that trains it, with ``state``, its directory's when planned
    (``RunDir.state``)."""

    state: str = "new"


class GridSession:
    """A context in which a grid runs: the process group (``device``: where its runs train), the
    threads of the runs trained here (``threads``, restored at the end) and the reporter (``None``:
    printed; silent on ranks other than 0)."""

    def __init__(self, device: str, threads: int | None, reporter: Reporter | None = None) -> None:
        self.device, self.threads = device, threads
        self.reporter = reporter or Reporter()
        self.dist = DistContext()
        self._saved_threads: int | None = None

    def __enter__(self) -> GridSession:
        self.dist = init_distributed(self.device)
        if not self.dist.is_main:
            self.reporter = Reporter.silent()
        self._saved_threads = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)  # the runs of this process (workers set their own)
        return self

    def __exit__(self, *exc) -> None:
        if self._saved_threads is not None:
            torch.set_num_threads(self._saved_threads)
        self.dist.close()

    def place_runs(self, opts: ExecutorOptions, *, threads: int | None, jobs: int | None,
                   small: bool = False):
        """``(device, executor)`` of the runs of this session: the device of this rank (``auto`` resolved;
        under torchrun a bare ``cuda`` is this rank's GPU), and the executor ``opts`` name (a context manager;
        under torchrun every rank runs the same runs in lockstep). Threads per run trained here (restored at
        the session's end): ``threads``, else 1 for a ``small`` model on CPU (its matrices are tiny: more
        threads per run only add synchronisation), else the session's. Runs at once on this machine: ``jobs``,
        else for a small model on CPU one per core up to 2 when this process is alone on its machine
        (torchrun's ranks share the cores), else 1 (a large model uses the cores, or the GPU, within one run);
        executors that place runs on a cluster do not use it."""
        device = resolve_device(self.device, self.dist.local_rank if self.dist.enabled else None)
        small_on_cpu = small and device.type == "cpu"
        if threads is not None or small_on_cpu:
            self.threads = threads if threads is not None else 1
        if self.threads:
            torch.set_num_threads(self.threads)
        if jobs is None:
            jobs = max(1, min(2, os.cpu_count() or 1)) if small_on_cpu and not self.dist.enabled else 1
        return device, make_executor(opts, jobs=jobs, threads=self.threads, device_type=device.type,
                                     lockstep=self.dist.enabled)

    def shard_done(self, opts: ExecutorOptions, done: int, total: int, *, reused: int | None = None,
                   then: str) -> None:
        """The line a ``--shard`` pass ends with: its runs done out of the grid's, and ``then`` (what
        to run once every shard is done)."""
        source = " (from SLURM_ARRAY_TASK_ID; --shard none: every run)" if opts.shard_env else ""
        before = f" ({reused} were finished before)" if reused is not None else ""
        self.reporter.say(f"shard {opts.shard}{source}: {done} of {total} runs done{before}; {then}")


NOT_FINISHED = {"new": "not finished", "partial": "not finished", "foreign": "not finished"}
HELD = {"partial": "unfinished", "finished": "finished"}


def refuse_runs(runs: Sequence[tuple[Path, str]], refused: Mapping[str, str], *, lead: str, then: str,
                root: Path | None = None, error: type[ValueError] = ValueError) -> None:
    """The one refusal of a grid's run directories by their state, before anything trains: ``error``
    (a ValueError: exit status 2) naming every directory of ``runs`` (``(directory, state)``, the state
    `RunDir.state` gave when planned) whose state is a key of ``refused``, grouped by its value (what
    the message calls them: `NOT_FINISHED` for ``--analyse-only``, `HELD` for a grid without
    ``--resume``), at most ten named per group (relative to ``root`` when given). The line reads
    ``LEAD: K of N runs are WORD (names) and ...; THEN``."""
    groups: dict[str, list[str]] = {}
    for directory, state in runs:
        if state in refused:
            name = os.path.relpath(directory, root) if root is not None else str(directory)
            groups.setdefault(refused[state], []).append(name)
    if groups:
        parts = [f"{len(names)} of {len(runs)} runs are {word} ({', '.join(names[:10])}"
                 f"{' ...' if len(names) > 10 else ''})" for word, names in groups.items()]
        raise error(f"{lead}: {' and '.join(parts)}; {then}")


def runs_of_this_process(opts: ExecutorOptions, runs: Sequence) -> list:
    """The runs this process trains: none with ``--analyse-only``, its ``--shard``'s slice, else all."""
    if opts.analyse_only:
        return []
    return opts.shard.select(list(runs)) if opts.shard is not None else list(runs)


def train_grid(runs: Sequence[GridRun], executor, reporter: Reporter, *, progress: bool | None,
               reuse_finished: bool = False, alone_here: bool = False) -> list[dict]:
    """Every run trained (or loaded) through ``executor``; the summaries in run order. With
    ``reuse_finished`` a run finished when planned is read, not submitted, and every summary says
    ``"reused"``. With ``alone_here``, a grid of one run that the executor would train in this process
    is called directly (its messages, its errors and a lock another process holds are the command's,
    as for a single ``vitplast finetune`` run)."""
    out = {i: {**RunDir(r.directory).summary(), "reused": True} for i, r in enumerate(runs)
           if reuse_finished and r.state == "finished"}
    todo = [i for i in range(len(runs)) if i not in out]
    if alone_here and len(runs) == 1 and todo and executor.in_process:
        summaries = [runs[0].fn(*runs[0].args, *runs[0].local_args)]
    else:
        jobs = [r for i, r in enumerate(runs) if i not in out]
        with contextlib.closing(GridProgress(reporter, total=len(runs), done=len(out), wanted=progress,
                                             desc="finetuning runs")) as bar:
            summaries = run_jobs(executor, jobs, bar)
    extra: dict[str, Any] = {"reused": False} if reuse_finished else {}
    out.update({i: {**s, **extra} for i, s in zip(todo, summaries, strict=True)})
    return [out[i] for i in range(len(runs))]
