"""The options of a grid's executor, one group that finetune and claim both compose (`ExecutorOptions`): where
the runs train (``--executor``, ``--jobs``, ``--ray-address``, the resources of a run), how often a run whose
worker died is retried, and which runs this process trains (``--shard I/N``, ``--analyse-only``)."""

from __future__ import annotations

import dataclasses
import os

from ...options import fields
from ...options.fields import Kind, OptionError, choice, integer, number, option, optional, settle
from .ray_tasks import RAY_EXTRA
from .registry import EXECUTORS, executor_module
from .shards import Shard, shard_from_env

GRID_TITLE = {"grid": "where the runs train (with Ray or --shard, every node must reach --out: shared "
                       "storage)"}


def _shard(value):
    """``I/N`` (1 <= I <= N), ``none``, or a `Shard`."""
    if isinstance(value, Shard) or value is None:
        return value
    if isinstance(value, str) and value.strip().lower() == "none":
        return "none"
    return Shard.parse(str(value))


@dataclasses.dataclass(frozen=True)
class ExecutorOptions:
    executor: str = option(
        "local", "local: the runs train on this machine (--jobs processes at once); ray: one Ray task per "
        f"run on a Ray cluster ({RAY_EXTRA}), retried elsewhere when its worker or node dies", group="grid",
        kind=choice(tuple(EXECUTORS)))
    jobs: int | None = option(None, "runs trained at once on this machine, in processes (--executor local; "
                              "default: 1)", group="grid", kind=optional(integer(1)))
    threads: int | None = option(None, "intra-op threads of every run, whichever executor trains it "
                                 "(default: torch's; with --executor ray, --cpus-per-run); runs of the same "
                                 "--threads give the same results bit for bit", group="grid",
                                 kind=optional(fields.thread_count()))
    ray_address: str | None = option(
        None, "the Ray cluster to run on: auto (the one `ray start` made on this machine) or HOST:PORT "
        "(default: start a Ray on this machine)", metavar="ADDRESS", group="grid")
    cpus_per_run: float | None = option(None, "CPUs Ray reserves for each run (default: --threads when "
                                        "given, else 1)", metavar="N", group="grid",
                                        kind=optional(number(positive=True)))
    gpus_per_run: float | None = option(None, "GPUs Ray reserves for each run, a fraction shares one "
                                        "(default: 1 with --device cuda, else 0)", metavar="N", group="grid",
                                        kind=optional(number(minimum=0.0)))
    retries: int = option(3, "times a run is retried after its worker or node died; it resumes from its "
                          "last checkpoint (default: %(default)s)", group="grid", kind=integer(0))
    shard: Shard | str | None = option(
        None, "train only slice I of N of the run list (1 <= I <= N; default: from SLURM_ARRAY_TASK_ID and "
        "SLURM_ARRAY_TASK_COUNT when both are set; none: the whole list); a final run without --shard, or "
        "with --analyse-only, analyses", metavar="I/N", group="grid",
        kind=optional(Kind(str, _shard)))
    analyse_only: bool = option(False, "train nothing: analyse the finished runs (after every shard is done)",
                                group="grid", action="store_true")
    shard_env: bool = option(False, cli=False)  # set by validate: --shard came from a SLURM array

    def validate_executor(self) -> None:
        """The checks of this group (called by the command's ``validate``)."""
        if self.shard == "none":
            settle(self, shard=None)
        elif self.shard is None and not self.analyse_only:
            settle(self, shard=shard_from_env(os.environ))
            settle(self, shard_env=self.shard is not None)
        if self.analyse_only and self.shard is not None:
            raise OptionError("--analyse-only analyses the whole grid: drop --shard")
        executor_module(self.executor).check_options(self)
        if self.jobs is not None and self.jobs > (os.cpu_count() or 1):
            raise OptionError(f"--jobs {self.jobs}: at most one run per core ({os.cpu_count() or 1} on this "
                              "machine)")
