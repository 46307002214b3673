"""The Ray executor: one Ray task per run, with the resources of one run (CPUs, GPUs), on a Ray cluster
(``ray start --head`` on one node, ``ray start --address HEAD:6379`` on the others) or a Ray started
here. Ray is imported only when this executor is chosen (the ``ray`` extra).

The driver keeps the schedule (:class:`~.jobs.Schedule`), as Ray Tune does: it keeps as many tasks in
flight as the live nodes hold, plus one queued, and its tasks are never retried by Ray itself
(``max_retries=0``). A task whose worker or node died (a Ray system error) is
submitted again, up to ``retries`` times, and resumes from the run's last checkpoint; it names the
attempt it replaces, so it takes that attempt's lock over at once. An error of the run itself (a
Ray task error) fails the run, and the grid goes on. The driver reads the lock files of the runs in
flight to show which are running and on how many nodes. Run directories must be on storage every node
reaches; the driver alone writes the experiment's summaries.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Sequence
from typing import Any

from ...options.fields import OptionError
from ..lock import RunLock
from .jobs import Job, Schedule, run_attempt
from .progress import GridProgress

POLL_S = 1.0  # how often the driver looks at the tasks in flight
SHOW_S = 2.0  # how often it reads their lock files for the progress bar
RAY_EXTRA = "pip install 'vitplast-kernels[ray]'"


def require_ray():
    """The ``ray`` module, or an :class:`OptionError` in one line naming the extra to install."""
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


class RayExecutor:
    """Runs as Ray tasks of ``cpus`` CPUs and ``gpus`` GPUs each, ``threads`` torch threads per task."""

    name = "ray"
    in_process = False

    def __init__(self, address: str | None, *, cpus: float, gpus: float, retries: int,
                 threads: int | None) -> None:
        self.address, self.cpus, self.gpus, self.retries = address, cpus, gpus, retries
        self.threads = threads or max(1, int(cpus))
        self.started_here = False
        self.ray = None
        self.shown = self.counted = 0.0
        self.slots = 0

    # -- the cluster ---------------------------------------------------------------------------------
    def __enter__(self) -> RayExecutor:
        """Connects (or starts a Ray here) and checks that some node can hold one run."""
        ray = self.ray = require_ray()
        if not ray.is_initialized():
            if self.address not in (None, "auto"):
                _check_reachable(self.address)
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=logging.ERROR,
                         **({} if self.address else {"include_dashboard": False}))
            except ConnectionError as exc:
                raise OptionError(f"--ray-address {self.address}: {str(exc).splitlines()[0]}") from None
            self.started_here = True
        try:
            self._check_resources()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.started_here and self.ray is not None:
            self.ray.shutdown()
            self.started_here = False

    def _check_resources(self) -> None:
        nodes = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
        if not any(r.get("CPU", 0) >= self.cpus and r.get("GPU", 0) >= self.gpus for r in nodes):
            most_cpu = max((r.get("CPU", 0) for r in nodes), default=0)
            most_gpu = max((r.get("GPU", 0) for r in nodes), default=0)
            raise OptionError(f"--cpus-per-run {self.cpus:g} / --gpus-per-run {self.gpus:g}: no node of the "
                              f"Ray cluster has that much (at most {most_cpu:g} CPUs, {most_gpu:g} GPUs on a "
                              "node)")

    def describe(self) -> str:
        nodes = sum(1 for n in self.ray.nodes() if n.get("Alive"))
        total = self.ray.cluster_resources()
        return (f"Ray cluster of {nodes} node(s), {total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} "
                f"GPUs; {self.cpus:g} CPU(s) and {self.gpus:g} GPU(s) per run")

    # -- the grid ------------------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], progress: GridProgress) -> list[Any]:
        """Every job's result in order; :class:`~.jobs.GridFailed` after the others when some failed."""
        ray = self.ray
        task = ray.remote(_ray_attempt).options(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0,
                                                retry_exceptions=False)
        sched = Schedule(jobs, progress, self.retries)
        flying: dict = {}
        try:
            while not sched.finished:
                while len(flying) < self._capacity() + 1 and (i := sched.take()) is not None:
                    job = sched.jobs[i]
                    flying[task.remote(job.fn, sched.args(i), sched.token(i), sched.supersedes(i),
                                       self.threads)] = i
                if not flying:
                    time.sleep(sched.wake_in())
                    continue
                ready, _ = ray.wait(list(flying), num_returns=1, timeout=min(POLL_S, sched.wake_in()))
                for ref in ready:
                    self._collect(sched, flying.pop(ref), ref)
                self._show(sched, flying, now=bool(ready))
        except BaseException:
            for ref in flying:
                ray.cancel(ref, force=True)
            raise
        return sched.result()

    def _capacity(self) -> int:
        """How many runs the live nodes hold at once (looked at every :data:`SHOW_S` seconds). The driver
        keeps that many tasks in flight and one more queued (demand an autoscaler sees), so a retry, put
        first in line, starts as soon as a slot frees rather than after every run not yet started."""
        if time.monotonic() - self.counted >= SHOW_S:
            self.counted, slots = time.monotonic(), 0
            for node in self.ray.nodes():
                r = node.get("Resources", {}) if node.get("Alive") else {}
                fits = [r.get("CPU", 0) / self.cpus] if self.cpus else []
                fits += [r.get("GPU", 0) / self.gpus] if self.gpus else []
                slots += int(min(fits)) if fits else 1
            self.slots = slots
        return self.slots

    def _collect(self, sched: Schedule, i: int, ref) -> None:
        exceptions = self.ray.exceptions
        try:
            sched.outcome(i, *self.ray.get(ref))
        except exceptions.RayTaskError as exc:  # the run itself raised
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
            sched.failed(i, cause, text=str(exc))
        except exceptions.RayError as exc:  # its worker or node died: retried
            sched.crashed(i, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])

    def _show(self, sched: Schedule, flying: dict, now: bool = False) -> None:
        """Runs whose lock names their current attempt are running; their nodes are in use (looked at
        every :data:`SHOW_S` seconds, and ``now``)."""
        if not now and time.monotonic() - self.shown < SHOW_S:
            return
        self.shown = time.monotonic()
        nodes = []
        for i in flying.values():
            found = RunLock(sched.jobs[i].directory).read()
            if found is not None and found[0].get("token") == sched.token(i):
                nodes.append(found[0].get("node") or found[0].get("host") or "?")
        sched.progress.update(len(nodes), nodes)
