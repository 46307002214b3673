"""Executors of a grid of runs, behind one interface (`Executor`): local processes (`local`), Ray tasks on a
cluster (`ray_tasks`, the ``ray`` extra), chosen by name through `registry`; and ``--shard I/N`` slices of the
run list (`Shard`) for schedulers such as SLURM arrays. Each takes `Job` objects (a function, its arguments, a
run directory) and knows nothing of what they train."""

from .base import Executor, ExecutorBase, Resources, run_jobs
from .jobs import Failure, GridFailed, GridRefused, Job
from .local import InProcessExecutor, ProcessExecutor
from .options import GRID_TITLE, ExecutorOptions
from .progress import GridProgress
from .registry import EXECUTORS, make_executor
from .shards import Shard, shard_from_env

__all__ = ["EXECUTORS", "GRID_TITLE", "Executor", "ExecutorBase", "ExecutorOptions", "Failure", "GridFailed",
           "GridProgress", "GridRefused", "InProcessExecutor", "Job", "ProcessExecutor", "Resources", "Shard",
           "make_executor", "run_jobs", "shard_from_env"]
