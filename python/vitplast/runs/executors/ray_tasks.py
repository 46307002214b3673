"""The Ray executor: one Ray task per run, with the resources of one run (CPUs, GPUs), on a Ray cluster
(``ray start --head`` on one node, ``ray start --address HEAD:6379`` on the others) or a Ray started here.
Ray is imported only when this executor is chosen (the ``ray`` extra).

The driver keeps the schedule (`run_jobs`), as Ray Tune does: it keeps as many tasks in flight as the live
nodes hold, plus one queued, and its tasks are never retried by Ray itself (``max_retries=0``). A task whose
worker or node died (a Ray system error) is submitted again, up to ``retries`` times, and resumes from the
run's last checkpoint; it names the attempt it replaces, so it takes that attempt's lock over at once. An
error of the run itself (a Ray task error) fails the run, and the grid goes on. The driver reads the lock
files of the runs in flight to show which are running and on how many nodes. Run directories must be on
storage every node reaches; the driver alone writes the experiment's summaries.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Sequence
from typing import Any

from ...options.fields import OptionError
from ...runtime.environment import world
from ..lock import RunLock
from .base import Attempt, Ended, ExecutorBase, Resources
from .jobs import run_attempt

POLL_S = 1.0  # how often the driver looks at the tasks in flight
SHOW_S = 2.0  # how often it reads their lock files for the progress bar
RAY_EXTRA = "pip install 'vitplast-kernels[ray]'"


def require_ray():
    """The ``ray`` module, or an `OptionError` in one line naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise OptionError(f"--executor ray: Ray is not installed; install it with {RAY_EXTRA}") from None
    return ray


def _ray_attempt(fn, args: tuple, token: str, supersedes: tuple[str, ...], threads: int | None):
    """The body of every task: one attempt of a job, its lock naming this Ray node."""
    import ray

    return run_attempt(fn, args, token, supersedes, threads, node=ray.get_runtime_context().get_node_id())


def _check_reachable(address: str) -> None:
    """``HOST:PORT`` must accept a connection (``ray.init`` retries an unreachable address for minutes)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise OptionError(f"--ray-address {address!r}: expected auto or HOST:PORT (e.g. 10.0.0.1:6379)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise OptionError(f"--ray-address {address}: no Ray cluster answers there ({exc.strerror or exc}); "
                          "start one with `ray start --head`") from None


def from_options(opts, *, jobs: int, threads: int | None, device_type: str, lockstep: bool = False):
    """A `RayExecutor` whose tasks reserve ``--cpus-per-run`` (default: ``threads``, else 1) and
    ``--gpus-per-run`` (default: 1 when ``device_type`` is cuda); ``jobs`` does not apply (the cluster
    decides how many runs train at once)."""
    if getattr(opts, "device", "auto").startswith("cuda:"):
        raise OptionError(f"--device {opts.device}: with --executor ray each run gets its GPU from Ray; pass "
                          "--device cuda")
    cpus = opts.cpus_per_run if opts.cpus_per_run is not None else float(threads or 1)
    gpus = opts.gpus_per_run if opts.gpus_per_run is not None else (1.0 if device_type == "cuda" else 0.0)
    return RayExecutor(opts.ray_address, cpus=cpus, gpus=gpus, retries=opts.retries, threads=threads)


def check_options(opts) -> None:
    """Ray places the runs itself (no ``--jobs``), not under torchrun, and must be installed."""
    if opts.jobs is not None:
        raise OptionError("--jobs applies to --executor local; Ray trains as many runs at once as "
                          "the cluster has room for (--cpus-per-run, --gpus-per-run)")
    if world()[0] > 1:
        raise OptionError("--executor ray: not under torchrun (each run would be data-parallel over "
                          "the torchrun processes); run it from a plain process")
    require_ray()


class RayExecutor(ExecutorBase):
    """Runs as Ray tasks of ``cpus`` CPUs and ``gpus`` GPUs each, ``threads`` torch threads per task."""

    def __init__(self, address: str | None, *, cpus: float, gpus: float, retries: int,
                 threads: int | None) -> None:
        self.address, self.retries = address, retries
        self.resources = Resources(cpus, gpus, threads or max(1, int(cpus)))
        self.started_here, self.ray = False, None
        self.tasks: dict[tuple[float, float], Any] = {}  # (cpus, gpus) -> the remote function
        self.shown, self.counted, self.slots_seen = 0.0, 0.0, 0
        self.attempts: dict[Any, Attempt] = {}  # handle -> its attempt
        self.running: list[str] = []

    # -- the cluster ---------------------------------------------------------------------------------
    def __enter__(self) -> RayExecutor:
        """Connects (or starts a Ray here) and checks that some node can hold one run."""
        ray = self.ray = require_ray()
        if not ray.is_initialized():
            if self.address not in (None, "auto"):
                _check_reachable(self.address)
            try:
                # no --ray-address: a Ray of its own ("local"; ray.init's default would join the cluster
                # started last on this machine, or RAY_ADDRESS's, which another job may stop meanwhile)
                ray.init(address=self.address or "local", log_to_driver=False, logging_level=logging.ERROR,
                         **({} if self.address else {"include_dashboard": False}))
            except ConnectionError as exc:
                raise OptionError(f"--ray-address {self.address}: {str(exc).splitlines()[0]}") from None
            self.started_here = True
        try:
            need, nodes = self.resources, self._live()
            if not any(r.get("CPU", 0) >= need.cpus and r.get("GPU", 0) >= need.gpus for r in nodes):
                most = {kind: max((r.get(kind, 0) for r in nodes), default=0) for kind in ("CPU", "GPU")}
                raise OptionError(f"--cpus-per-run {need.cpus:g} / --gpus-per-run {need.gpus:g}: no node of "
                                  f"the Ray cluster has that much (at most {most['CPU']:g} CPUs, "
                                  f"{most['GPU']:g} GPUs on a node)")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.started_here and self.ray is not None:
            self.ray.shutdown()
            self.started_here = False

    def _live(self) -> list[dict]:
        """The resources of every live node."""
        return [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]

    def describe(self) -> str:
        total = self.ray.cluster_resources()
        return (f"Ray cluster of {len(self._live())} node(s), {total.get('CPU', 0):g} CPUs, "
                f"{total.get('GPU', 0):g} GPUs; {self.resources.cpus:g} CPU(s) and {self.resources.gpus:g} "
                "GPU(s) per run")

    # -- the attempts --------------------------------------------------------------------------------
    def slots(self) -> int:
        """How many runs the live nodes hold at once (looked at every `SHOW_S` seconds), plus one
        queued (demand an autoscaler sees), so a retry, put first in line, starts as soon as a slot
        frees rather than after every run not yet started."""
        if time.monotonic() - self.counted >= SHOW_S:
            self.counted, self.slots_seen, need = time.monotonic(), 0, self.resources
            for r in self._live():
                fits = [r.get(kind, 0) / n for kind, n in (("CPU", need.cpus), ("GPU", need.gpus)) if n]
                self.slots_seen += int(min(fits)) if fits else 1
        return self.slots_seen + 1

    def submit(self, attempt: Attempt):
        need = attempt.resources
        if (need.cpus, need.gpus) not in self.tasks:
            self.tasks[need.cpus, need.gpus] = self.ray.remote(_ray_attempt).options(
                num_cpus=need.cpus, num_gpus=need.gpus, max_retries=0, retry_exceptions=False)
        ref = self.tasks[need.cpus, need.gpus].remote(attempt.job.fn, attempt.args, attempt.token,
                                                       attempt.supersedes, need.threads)
        self.attempts[ref] = attempt
        return ref

    def wait(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, Ended]]:
        ready, _ = self.ray.wait(list(handles), num_returns=1, timeout=min(POLL_S, timeout))
        for ref in ready:
            self.attempts.pop(ref, None)
            self.shown = 0.0  # look at the nodes again now
        return [(ref, self._ended(ref)) for ref in ready]

    def _ended(self, ref) -> Ended:
        try:
            return Ended(*self.ray.get(ref))
        except self.ray.exceptions.RayTaskError as exc:  # the run itself raised
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
            return Ended("failed", cause, text=str(exc))
        except self.ray.exceptions.RayError as exc:  # its worker or node died: retried
            return Ended("crashed", text=f"{type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}"[:300])

    def cancel(self, handle) -> None:
        self.attempts.pop(handle, None)
        self.ray.cancel(handle, force=True)

    def nodes(self, handles: Sequence[Any]) -> list[str]:
        """Runs whose lock names their current attempt are running; their nodes are in use (looked at
        every `SHOW_S` seconds, and after an attempt ended)."""
        if time.monotonic() - self.shown < SHOW_S:
            return self.running
        self.shown = time.monotonic()
        self.running = []
        for ref in handles:
            attempt = self.attempts.get(ref)
            found = RunLock(attempt.job.directory).read() if attempt is not None else None
            if found is not None and found[0].get("token") == attempt.token:
                self.running.append(found[0].get("node") or found[0].get("host") or "?")
        return self.running
