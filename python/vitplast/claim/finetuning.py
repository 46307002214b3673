"""The finetuning runs of `vitplast claim`: one `vitplast.finetune.loop.train_run` per (dataset, train,
lr, seed), planned by `vitplast.finetune.grid.plan_grid` and trained through an executor
(`vitplast.runs.executors`).

Every run trains into its own directory ``DATASET_OUT/runs/<train>-lr<lr>-s<seed>/`` (the finetune run
layout: config.json, metrics.jsonl, checkpoint.pt, summary.json) and is always called with
``resume=True``: a finished directory (summary.json present) is loaded without training, a partial
one (config.json, no summary) continues from its last checkpoint, a new one starts. A killed `claim`
therefore loses at most the steps since each interrupted run's last checkpoint. Before anything is
trained, every existing run's config.json is compared with the options (`plan_runs`): a
mismatch is named, never trained over, which keeps one OUT one experiment.

The run list is deterministic (datasets in the order given, then seeds, trains and learning rates),
so ``--shard I/N`` slices the same list in every process; results do not depend on the executor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..finetune.grid import PlannedRun, config_mismatches, mismatch_message, plan_grid
from ..finetune.options import RunSettings
from ..finetune.preflight import Prepared
from ..outputs.reporter import Reporter
from ..runs.grid import refuse_runs, train_grid


def plan_runs(out: Path, settings: RunSettings, trains: list[str], lrs: list[float], seeds: list[int],
              dataset: str = "", *, root: Path) -> list[PlannedRun]:
    """Every (train, lr, seed) of one dataset with its directory under ``out/runs`` and its state, in
    training order (seed-major, so an interrupted claim has whole seeds to show); ValueError naming
    every run directory that holds no run, or a run of other options (``root``: ``--out``, which the
    message names the directories under)."""
    runs = plan_grid(settings, trains, lrs, seeds, out / "runs", seed_major=True, dataset=dataset)
    foreign = {"foreign": "directories that hold no finetuning run"}
    refuse_runs([(r.spec.directory, r.state) for r in runs], foreign, lead=f"--out {root}", root=root,
                then="choose another --out")
    mismatches = config_mismatches([r.spec for r in runs])
    if mismatches:
        raise ValueError(mismatch_message(mismatches, root=root))
    return runs


def train_all(runs: Sequence[PlannedRun], prepared: Mapping[str, Prepared], executor, reporter: Reporter, *,
              progress: bool, after_step: Callable[[int], None] | None = None) -> list[dict]:
    """Train (or load) every run through the grid driver; returns the summaries in run order, each with
    ``"reused"`` (True when it was finished before). ``after_step`` is passed to every run trained in
    this process (its messages dropped, as in a worker)."""
    grid = [r.grid_run(prepared[r.dataset], local_args=(None, None, after_step)) for r in runs]
    return train_grid(grid, executor, reporter, progress=progress, reuse_finished=True)
