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

from pathlib import Path

from ..finetune.grid import PlannedRun, config_mismatches, mismatch_message, plan_grid
from ..finetune.options import RunSettings
from ..runs.grid import refuse_runs


def plan_runs(out: Path, settings: RunSettings, trains: list[str], lrs: list[float], seeds: list[int],
              dataset: str = "", *, root: Path) -> list[PlannedRun]:
    """Every (train, lr, seed) of one dataset with its directory under ``out/runs`` and its state, in
    training order (seed-major, so an interrupted claim has whole seeds to show); ValueError naming
    every run directory that holds no run, or a run of other options (``root``: ``--out``, which the
    message names the directories under)."""
    runs = plan_grid(settings, trains, lrs, seeds, out / "runs", seed_major=True, dataset=dataset)
    # the runs of other options named while the grid's module is at hand (a foreign directory, which
    # holds no config, is no mismatch), refused after the foreign directories
    mismatches = config_mismatches([r.spec for r in runs])
    mismatched = mismatch_message(mismatches, root=root) if mismatches else None
    foreign = {"foreign": "directories that hold no finetuning run"}
    refuse_runs([(r.spec.directory, r.state) for r in runs], foreign, lead=f"--out {root}", root=root,
                then="choose another --out")
    if mismatched:
        raise ValueError(mismatched)
    return runs

