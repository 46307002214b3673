"""Bounds on what a command may start: no more data-loading processes than the CPUs it may use."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_workers(workers: int | str | None, flag: str | None = "--workers") -> None:
    """ValueError naming ``flag`` (none: the value alone, for an option check that adds its flag) when
    ``workers`` data-loading processes exceed the usable CPUs (a value that is no integer is left to the
    option's own check)."""
    try:
        workers = int(workers)
    except (TypeError, ValueError):
        return
    if workers > (cpus := usable_cpus()):
        raise ValueError(f"{f'{flag} ' if flag else ''}{workers}: this process may use {cpus} CPU(s); use at "
                         f"most {cpus} data-loading processes (0 loads in the main process)")
