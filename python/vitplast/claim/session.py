"""Where a claim runs (`open_session`): its grid session (`vitplast.runs.grid.GridSession`: the process
group, the threads of the runs trained here, the reporter), the device, how many runs train at once
and the executor that trains them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from ..models.families import family_of
from ..outputs.reporter import Reporter
from ..runs.executors import Executor
from ..runs.grid import GridSession
from ..runtime.distributed import DistContext
from ..runtime.precision import autocast
from .options import ClaimOptions


@dataclasses.dataclass(frozen=True)
class ClaimSession:
    """Where a claim runs: its grid session (process group, threads, reporter), device, executor, and
    how many runs share this machine."""

    grid: GridSession
    device: object  # torch.device
    reporter: Reporter
    progress: bool
    threads: int | None
    executor: Executor
    n_procs: int  # runs at once on this machine (1 where a cluster places them)
    amp: object  # --amp's autocast contexts on the device (`vitplast.runtime.precision.autocast`)

    @property
    def dist(self) -> DistContext:
        return self.grid.dist


@contextlib.contextmanager
def open_session(opts: ClaimOptions, reporter: Reporter | None) -> Iterator[ClaimSession]:
    """The session of the claim ``opts`` describes: threads per run and runs at once as
    `vitplast.runs.grid.GridSession.place_runs` picks them for ``--threads``, ``--jobs`` and the model
    (the digits ViT is small: on CPU one thread per run, and runs side by side)."""
    with GridSession(opts.device, None, reporter) as grid:  # the process group each finetune run joins
        device, executor = grid.place_runs(opts, small=family_of(opts.model).small, threads=opts.threads,
                                           jobs=opts.jobs)
        progress = grid.reporter.shows_progress(opts.progress) and grid.dist.is_main
        yield ClaimSession(grid, device, grid.reporter, progress, grid.threads, executor,
                           executor.runs_at_once or 1, autocast(opts.amp, device))
