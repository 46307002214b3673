"""The finetuning runs of `vitplast claim`: one `vitplast.finetune.train_run` per (dataset, train,
lr, seed), trained through an executor (`vitplast.runs.executors`).

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

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..finetune import (
    Prepared,
    RunSettings,
    RunSpec,
    config_mismatches,
    mismatch_message,
    run_name,
    train_run,
)
from ..outputs.reporter import Reporter
from ..runs.grid import GridRun, train_grid
from ..runs.rundir import RunDir


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of the claim's grid, the state of its directory when planned (``RunDir.state``: new,
    partial, finished or foreign) and its dataset's name."""

    spec: RunSpec
    state: str
    dataset: str = ""


def plan_runs(out: Path, settings: RunSettings, trains: list[str], lrs: list[float], seeds: list[int],
              dataset: str = "", *, root: Path) -> list[PlannedRun]:
    """Every (train, lr, seed) of one dataset with its directory under ``out/runs`` and its state, in
    training order (seed-major, so an interrupted claim has whole seeds to show); ValueError naming
    every run directory that holds no run, or a run of other options (``root``: ``--out``, which the
    message names the directories under)."""
    runs = []
    for seed in seeds:
        for train in trains:
            for lr in lrs:
                path = out / "runs" / run_name(train, lr, seed)
                spec = RunSpec(train, lr, seed, path, settings)
                runs.append(PlannedRun(spec, RunDir(path).state(), dataset))
    foreign = [str(r.spec.directory) for r in runs if r.state == "foreign"]
    if foreign:
        raise ValueError(f"{len(foreign)} run director{'y is' if len(foreign) == 1 else 'ies are'} not "
                         f"empty and hold no finetuning run ({', '.join(foreign)}); choose another --out")
    mismatches = config_mismatches([r.spec for r in runs])
    if mismatches:
        raise ValueError(mismatch_message(mismatches, root=root))
    return runs


def train_one_run(spec: RunSpec, prepared: Prepared, after_step: Callable[[int], None] | None = None) -> dict:
    """One run, its messages dropped (the body of every job, in whatever process runs it)."""
    return train_run(spec, prepared, reporter=Reporter.silent(), after_step=after_step)


def train_all(runs: Sequence[PlannedRun], prepared: Mapping[str, Prepared], executor, reporter: Reporter, *,
              progress: bool, after_step: Callable[[int], None] | None = None) -> list[dict]:
    """Train (or load) every run through the grid driver; returns the summaries in run order, each with
    ``"reused"`` (True when it was finished before). ``after_step`` is passed to every run trained in
    this process."""
    grid = [GridRun(r.spec.directory, _label(r), train_one_run, (r.spec, prepared[r.dataset]),
                    local_args=(after_step,), state=r.state) for r in runs]
    return train_grid(grid, executor, reporter, progress=progress, reuse_finished=True)


def _label(run: PlannedRun) -> str:
    return f"{run.dataset}: {run.spec.label}" if run.dataset else run.spec.label
