"""The environment variables a ``vitplast`` command reads, checked when it starts (`check_environment`):
a value it does not accept raises ``ValueError`` naming the variable and what it accepts, which the CLI
ends with exit status 2 and one line.

- ``VITPLAST_TRACEBACK``: on for ``1``, ``true``, ``yes``; off for ``0``, ``false``, ``no`` or unset;
- ``VITPLAST_COMPILED_REDUCTION``, ``VITPLAST_GPU_BACKEND``, ``VITPLAST_AUTOTUNE``: the kernel library's
  (`vitplast_kernels.environment`);
- ``VITPLAST_CPU_KERNEL``: ``auto``, ``avx512``, ``avx2`` or ``generic``; ``VITPLAST_CUDA_CHUNK``: a
  positive integer; ``VITPLAST_CACHE``: a directory (checked where it is used);
- ``WORLD_SIZE`` (an integer >= 1), ``RANK`` (0 <= RANK < WORLD_SIZE), ``LOCAL_RANK`` (>= 0): torchrun's;
- ``SLURM_ARRAY_TASK_ID``, ``SLURM_ARRAY_TASK_COUNT``, ``SLURM_ARRAY_TASK_MIN``,
  ``SLURM_ARRAY_TASK_STEP``: integers (a SLURM array's, read by ``--shard``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from vitplast_kernels import environment as kernel_environment

TRACEBACK = "VITPLAST_TRACEBACK"
CPU_KERNELS = ("auto", "avx512", "avx2", "generic")
SLURM_INTEGERS = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                  "SLURM_ARRAY_TASK_STEP")


def env_integer(name: str, default: int, minimum: int = 0, env: Mapping[str, str] | None = None,
            accepts: str | None = None) -> int:
    """The integer value of ``name`` (``default`` when unset or empty); ValueError naming it otherwise."""
    text = (os.environ if env is None else env).get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ValueError(f"{name}={text!r}: must be {accepts or f'an integer >= {minimum}'}")
    return value


def traceback_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``VITPLAST_TRACEBACK`` asks for tracebacks (``1``/``true``/``yes``); a value it does not
    accept counts as off here (`check_environment` reports it)."""
    try:
        return kernel_environment.switch(TRACEBACK, env)
    except ValueError:
        return False


def world(env: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """``(WORLD_SIZE, RANK, LOCAL_RANK)`` as torchrun sets them (``(1, 0, 0)`` outside it); ValueError
    naming the variable whose value is not one."""
    size = env_integer("WORLD_SIZE", 1, 1, env,
                       "an integer >= 1 (the number of processes, as torchrun sets it)")
    rank = env_integer("RANK", 0, 0, env, "an integer >= 0 (this process's rank, as torchrun sets it)")
    if rank >= size and (os.environ if env is None else env).get("WORLD_SIZE", "").strip():
        raise ValueError(f"RANK={rank}: must be an integer in 0..{size - 1} (WORLD_SIZE={size})")
    local = env_integer("LOCAL_RANK", 0, 0, env, "an integer >= 0 (this process's GPU on its node)")
    return size, rank, local


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Raises ``ValueError`` naming the first variable (see the module docstring) whose value is not one
    it accepts."""
    env = os.environ if env is None else env
    kernel_environment.switch(TRACEBACK, env)
    kernel_environment.check_environment(env)
    cpu = env.get("VITPLAST_CPU_KERNEL", "").strip()
    if cpu and cpu not in CPU_KERNELS:
        raise ValueError(f"VITPLAST_CPU_KERNEL={cpu!r}: must be one of {', '.join(CPU_KERNELS)} (or unset)")
    env_integer("VITPLAST_CUDA_CHUNK", 0, 1, env, "a positive integer (elements per CUDA task)")
    world(env)
    for name in SLURM_INTEGERS:
        env_integer(name, 0, -(2**62), env, "an integer (as SLURM sets it); or pass --shard I/N")
