"""How long a claim's runs take, estimated before any is trained (``--dry-run``, ``--time-budget``):
short runs timed in this process (`calibrate`) and the wall time of the runs still to train from them
(`estimate_seconds`); ``--time-budget``'s refusal."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

from ..finetune.loop import train_run
from ..finetune.options import RunSettings
from ..finetune.preflight import Prepared
from ..finetune.spec import RunSpec
from ..outputs.reporter import Reporter
from .grid import ClaimPlan
from .options import COMPONENT_STEPS, LAYER_STEPS, ClaimOptions


def estimate_claim(opts: ClaimOptions, plan: ClaimPlan, *, n_procs: int, on_cluster: bool,
                   reporter: Reporter) -> dict | None:
    """With ``--dry-run`` or ``--time-budget`` (else None): short timed runs (on the first dataset, in
    this process), the wall time of this process's runs still to train (``n_procs`` at once;
    ``on_cluster``: a cluster decides how many), and ``--time-budget``'s refusal.

    The wall time of the runs still to train, from the calibration: overhead + steps x step time each
    (a partial run counted whole; a train not calibrated counts as the first one), divided over
    ``n_procs`` runs at once (assumes free cores). The calibrated step times are said with the trains
    of the same time grouped (a layer claim has ~25 trains)."""
    if not opts.dry_run and opts.time_budget is None:
        return None
    first = plan.grids[0]  # its model built by the plan: a one-time pretraining is not timed here
    calib = calibrate(first.dataset.settings, first.prepared, first.trains,
                      probe_steps=min(opts.calibrate_steps, opts.steps))
    todo = [r for r in plan.mine if r.state != "finished"]
    step_s = calib["step_s"]
    first_step = next(iter(step_s.values()))
    total = sum(calib["overhead_s"] + opts.steps * step_s.get(r.spec.train, first_step) for r in todo)
    seconds = total / max(1, min(n_procs, len(todo) or 1))
    procs = f" over {n_procs} processes (if the cores are free)" if n_procs > 1 else ""
    if on_cluster:
        procs = " of run time in all (the cluster divides it by the runs it trains at once)"
    note = "; --lr auto may add runs" if opts.lr_auto else ""
    most = plan.summary["budget_runs_after_scoring_at_most"]
    note += f"; the criteria's sets may add up to {most} runs (not in this estimate)" if most else ""
    note += "; timed on the first arm (dataset and optimiser)" if plan.several else ""
    if opts.granularity == "layer" and opts.steps == LAYER_STEPS:
        note += (f"; a layer claim trains {LAYER_STEPS} steps per run by default ({COMPONENT_STEPS} for a "
                 "component claim) to stay near 10 min on 2 cores")
    groups: dict[str, list[str]] = {}
    for t, v in step_s.items():
        groups.setdefault(f"{1000 * v:.1f}", []).append(t)
    steps = ", ".join(f"{', '.join(ts) if len(ts) <= 3 else f'{len(ts)} trains'} {v}"
                      for v, ts in groups.items())
    reporter.say(f"estimate: {calib['overhead_s']:.1f} s per run + per step (ms): {steps}; {len(todo)} runs "
                 f"to train: about {seconds / 60:.1f} min{procs} (calibration took {calib['seconds']:.1f} s)"
                 f"{note}")
    if opts.time_budget is not None and seconds > 60 * opts.time_budget:
        raise ValueError(f"the estimated {seconds / 60:.1f} min exceed --time-budget {opts.time_budget:g} "
                         "min: fewer --lr/--seed values or --steps")
    return {**calib, "remaining_seconds": seconds, "jobs": n_procs}


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
            train_run(RunSpec(train, 1e-4, 0, Path(tmp) / name, probe, resume=False), prepared,
                      reporter=Reporter.silent())
            return time.perf_counter() - t0

        timed(component, 1, "warm-up")  # first-time imports and allocations do not count
        overhead = timed(component, 1, "overhead")
        step_s = {t: max(0.0, (timed(t, 1 + probe_steps, f"{t}-steps") - overhead) / probe_steps)
                  for t in kinds}
    step_s = {t: step_s.get(t, step_s[component]) for t in trains}
    return {"overhead_s": overhead, "step_s": step_s, "probe_steps": probe_steps,
            "seconds": time.perf_counter() - t_start}
