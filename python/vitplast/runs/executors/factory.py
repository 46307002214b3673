"""The executor a command's options ask for (:func:`make_executor`)."""

from __future__ import annotations

from ...options.fields import OptionError
from .local import LocalExecutor
from .options import ExecutorOptions
from .ray_tasks import RayExecutor


def make_executor(opts: ExecutorOptions, *, jobs: int, threads: int | None, device_type: str,
                  lockstep: bool = False):
    """A :class:`LocalExecutor` of ``jobs`` processes (``lockstep``: one rank of a torchrun group) or a
    :class:`RayExecutor` whose tasks reserve ``--cpus-per-run`` (default: ``threads``, else 1) and
    ``--gpus-per-run`` (default: 1 when ``device_type`` is cuda). Use it as a context manager: a Ray
    started here stops at its end."""
    if opts.executor == "local":
        return LocalExecutor(jobs=jobs, threads=threads, retries=opts.retries, lockstep=lockstep)
    if getattr(opts, "device", "auto").startswith("cuda:"):
        raise OptionError(f"--device {opts.device}: with --executor ray each run gets its GPU from Ray; pass "
                          "--device cuda")
    cpus = opts.cpus_per_run if opts.cpus_per_run is not None else float(threads or 1)
    gpus = opts.gpus_per_run if opts.gpus_per_run is not None else (1.0 if device_type == "cuda" else 0.0)
    return RayExecutor(opts.ray_address, cpus=cpus, gpus=gpus, retries=opts.retries, threads=threads)
