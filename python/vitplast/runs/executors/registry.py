"""The executors by name (`EXECUTORS`, what ``--executor`` takes): each a module of this package
with ``from_options(opts, *, jobs, threads, device_type, lockstep)``, which returns an
`Executor`, and ``check_options(opts)``, which refuses the grid options it does not take.
Adding an executor is adding its module and one line here."""

from __future__ import annotations

import importlib

EXECUTORS = {
    "local": "vitplast.runs.executors.local",
    "ray": "vitplast.runs.executors.ray_tasks",
}


def executor_module(name: str):
    """The module of executor ``name`` (imported only when chosen: Ray's is an extra)."""
    return importlib.import_module(EXECUTORS[name])


def make_executor(opts, *, jobs: int, threads: int | None, device_type: str, lockstep: bool = False):
    """The executor ``opts.executor`` names, for runs of ``threads`` intra-op threads on ``device_type``
    (``jobs``: runs at once on this machine, where the executor decides that; ``lockstep``: this process
    is one rank of a torchrun group). Use it as a context manager: a cluster connected there is left at
    its end."""
    return executor_module(opts.executor).from_options(opts, jobs=jobs, threads=threads,
                                                       device_type=device_type, lockstep=lockstep)
