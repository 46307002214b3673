"""Executors of a grid of runs: local processes (:class:`LocalExecutor`), Ray tasks on a cluster
(:class:`RayExecutor`, the ``ray`` extra), and ``--shard I/N`` slices of the run list
(:class:`Shard`) for schedulers such as SLURM arrays. Each takes :class:`Job` objects (a function,
its arguments, a run directory) and knows nothing of what they train."""

from .factory import make_executor
from .jobs import Failure, GridFailed, GridRefused, Job
from .local import LocalExecutor
from .options import GRID_TITLE, ExecutorOptions
from .progress import GridProgress
from .ray_tasks import RayExecutor, require_ray
from .shards import Shard, shard_from_env

__all__ = ["GRID_TITLE", "ExecutorOptions", "Failure", "GridFailed", "GridProgress", "GridRefused", "Job",
           "LocalExecutor", "RayExecutor", "Shard", "make_executor", "require_ray", "shard_from_env"]
