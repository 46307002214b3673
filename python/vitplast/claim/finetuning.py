"""The finetuning runs of `vitplast claim`: one `vitplast.finetune.train_run` per (dataset, train,
lr, seed), trained through an executor (`vitplast.runs.executors`).

Every run trains into its own directory ``DATASET_OUT/runs/<train>-lr<lr>-s<seed>/`` (the finetune run
layout: config.json, metrics.jsonl, checkpoint.pt, summary.json) and is always called with
``resume=True``: a finished directory (summary.json present) is loaded without training, a partial
one (config.json, no summary) continues from its last checkpoint, a new one starts. A killed `claim`
therefore loses at most the steps since each interrupted run's last checkpoint. Before anything is
trained, every existing run's config.json is compared with the options (`check_plan`): a
mismatch is named, never trained over, which keeps one OUT one experiment.

The run list is deterministic (datasets in the order given, then seeds, trains and learning rates),
so ``--shard I/N`` slices the same list in every process; results do not depend on the executor.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
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
              dataset: str = "") -> list[PlannedRun]:
    """Every (train, lr, seed) of one dataset with its directory under ``out/runs`` and its state, in
    training order (seed-major, so an interrupted claim has whole seeds to show)."""
    runs = []
    for seed in seeds:
        for train in trains:
            for lr in lrs:
                path = out / "runs" / run_name(train, lr, seed)
                spec = RunSpec(train, lr, seed, path, settings)
                runs.append(PlannedRun(spec, RunDir(path).state(), dataset))
    return runs


def check_plan(runs: Sequence[PlannedRun], root: Path) -> None:
    """ValueError naming every run directory that holds no run, or a run of other options."""
    foreign = [str(r.spec.directory) for r in runs if r.state == "foreign"]
    if foreign:
        raise ValueError(f"{len(foreign)} run director{'y is' if len(foreign) == 1 else 'ies are'} not "
                         f"empty and hold no finetuning run ({', '.join(foreign)}); choose another --out")
    mismatches = config_mismatches([r.spec for r in runs])
    if mismatches:
        raise ValueError(mismatch_message(mismatches, root=root))


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


def calibrate(settings: RunSettings, prepared: Prepared, trains: list[str], *, probe_steps: int,
              folder: Path | None = None) -> dict:
    """Time short runs in this process (with the threads its grid session set) to estimate a full one:
    a 1-step run of the first trained component (fixed cost: model, data, two evaluations) and
    ``1 + probe_steps``-step runs of it and of ``head`` when listed (the cost of a step, which differs:
    a head-only step stops its backward at the head). Returns ``{"overhead_s", "step_s": {train:
    seconds per step}, "seconds"}``."""
    t_start = time.perf_counter()
    component = next((t for t in trains if t != "head"), trains[0])
    kinds = [component] + (["head"] if "head" in trains and component != "head" else [])
    with tempfile.TemporaryDirectory(prefix="claim-calibration-", dir=folder) as tmp:
        def timed(train: str, steps: int, name: str) -> float:
            probe = dataclasses.replace(settings, steps=steps, checkpoint_every=0, plots=False,
                                        progress=False)
            t0 = time.perf_counter()
            train_one_run(RunSpec(train, 1e-4, 0, Path(tmp) / name, probe, resume=False), prepared)
            return time.perf_counter() - t0

        timed(component, 1, "warm-up")  # first-time imports and allocations do not count
        overhead = timed(component, 1, "overhead")
        step_s = {t: max(0.0, (timed(t, 1 + probe_steps, f"{t}-steps") - overhead) / probe_steps)
                  for t in kinds}
    step_s = {t: step_s.get(t, step_s[component]) for t in trains}
    return {"overhead_s": overhead, "step_s": step_s, "probe_steps": probe_steps,
            "seconds": time.perf_counter() - t_start}


def estimate_seconds(runs: Sequence[PlannedRun], calib: dict, steps: int, n_procs: int) -> float:
    """Wall time of the runs still to train, from a calibration: overhead + steps x step time each
    (a partial run counted whole; a train not calibrated counts as the first one), divided over
    ``n_procs`` runs at once (assumes free cores)."""
    todo = [r for r in runs if r.state != "finished"]
    first = next(iter(calib["step_s"].values()))
    total = sum(calib["overhead_s"] + steps * calib["step_s"].get(r.spec.train, first) for r in todo)
    return total / max(1, min(n_procs, len(todo) or 1))
