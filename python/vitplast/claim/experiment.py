"""``claim(opts)``: the library function behind ``vitplast claim`` (see its HELP in command.py)."""


from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path

from ..finetune import RunSettings, prepare
from ..models.builder import DIGITS_MODEL, build_model
from ..options.fields import options_for
from ..outputs.reporter import Reporter
from ..runs.rundir import write_json_atomic
from ..runtime.device import resolve_device
from ..runtime.distributed import DistContext, init_distributed
from ..runtime.precision import autocast
from .analysis import analyse
from .layer_report import format_layer_report, plot_layer_claim
from .layers import analyse_layers, default_budget, plan_selections, unit_name, units_of
from .lr_auto import lrs_run, train_widening
from .options import COMPONENT_STEPS, LAYER_STEPS, ClaimOptions
from .plasticity import measure_chunks
from .report import format_report, plot_claim
from .runs import PlannedRun, calibrate, estimate_seconds, plan_runs, train_all


@dataclasses.dataclass(frozen=True)
class Session:
    """Where a claim runs: its process group, device, reporter, and how runs share the machine."""

    dist: DistContext
    device: object  # torch.device
    reporter: Reporter
    progress: bool
    threads: int | None
    n_procs: int


def _threads(opts: ClaimOptions, device) -> int | None:
    """``--threads``, else 1 for the digits ViT on CPU (its matrices are tiny: more threads per run
    only add synchronisation), else torch's default."""
    if opts.threads is not None:
        return opts.threads
    return 1 if opts.model == DIGITS_MODEL and device.type == "cpu" else None


def _jobs(opts: ClaimOptions, device) -> int:
    """``--jobs``, else one process per core up to 2 for the digits ViT on CPU (one thread each),
    else 1 (a large model uses the cores, or the GPU, within one run)."""
    if opts.jobs is not None:
        return opts.jobs
    if opts.model == DIGITS_MODEL and device.type == "cpu" and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return max(1, min(2, os.cpu_count() or 1))
    return 1


MEASUREMENT_KEYS = ("model", "weights", "model_kwargs", "img_size", "pretrain_data", "data", "split",
                    "protocol", "pairs", "pair_batch", "measure_seed", "amp")


def _measurement(opts: ClaimOptions, ses: Session, write: bool) -> dict:
    """Plasticity chunks: loaded from OUT/plasticity_chunks.json when measured with these options,
    else measured (and saved when ``write``)."""
    import torch

    from ..data.datasets import load_dataset

    out = Path(opts.out)
    config = {**{k: getattr(opts, k) for k in MEASUREMENT_KEYS}, "model_seed": opts.seed[0]}
    path = out / "plasticity_chunks.json"
    if path.exists():
        saved = json.loads(path.read_text())
        if saved["config"] != json.loads(json.dumps(config)):
            diffs = [k for k in config if saved["config"].get(k) != config[k]]
            raise ValueError(f"--out {out} holds a claim measured with other options ({', '.join(diffs)}); "
                             "choose another --out")
        ses.reporter.say(f"plasticity: loaded from {path}")
        return saved
    n_classes = load_dataset(opts.data, "val", img_size=opts.img_size or 32, seed=0).num_classes
    with torch.random.fork_rng(devices=[]):  # a random-init model is the one seed[0]'s run starts from
        torch.manual_seed(opts.seed[0])
        built = build_model(opts.model, n_classes, weights=opts.weights, model_kwargs=opts.model_kwargs,
                            img_size=opts.img_size, progress=ses.progress)
    x_set = load_dataset(opts.pretrain_data, opts.split, img_size=built.img_size, seed=opts.measure_seed)
    y_set = load_dataset(opts.data, opts.split, img_size=built.img_size, seed=opts.measure_seed)
    measured = measure_chunks(built.net, x_set, y_set, protocol=opts.protocol, pairs=opts.pairs,
                              pair_batch=opts.pair_batch, seed=opts.measure_seed, device=ses.device,
                              amp=autocast(opts.amp, ses.device), progress=ses.progress)
    measured["config"] = config
    if write:
        write_json_atomic(path, measured)
    ses.reporter.say(f"plasticity: {measured['pairs']} matched pairs in {measured['chunks']} chunks, "
                     f"{measured['seconds']:.1f} s")
    return measured


def claim_options(opts: ClaimOptions | None = None, /, **keywords) -> ClaimOptions:
    """``opts`` checked, or the options the keywords describe (the CLI's names, underscores for dashes:
    ``components="MHA,FC1,LN1"``, ``lr="1e-3,3e-3"``, ``seed="0,1,2"``, ``out=DIR``)."""
    return options_for(ClaimOptions, opts, keywords)


def claim(opts: ClaimOptions | None = None, /, *, reporter: Reporter | None = None, after_step=None,
          **keywords) -> dict:
    """Run the claim ``opts`` describes (a :class:`ClaimOptions`, or keywords that build one).

    Returns ``{"config", "plan", "estimate", "measurement", "analysis", "runs", "text"}`` (a dry run:
    only ``config``, ``plan`` and ``estimate``). Writes OUT/claim.json, OUT/claim.txt, OUT/claim.png.
    ``reporter`` receives the messages (default: printed); ``after_step(done)`` is called after every
    step of every run trained in this process (a test may raise there to stop as if killed).
    """
    import torch

    opts = claim_options(opts, **keywords)
    dist = init_distributed(opts.device)  # the claim's process group: each finetune run joins it
    reporter = (reporter or Reporter()) if dist.is_main else Reporter.silent()
    device = resolve_device(opts.device, dist.local_rank if dist.enabled else None)
    ses = Session(dist, device, reporter, reporter.shows_progress(opts.progress) and dist.is_main,
                  _threads(opts, device), _jobs(opts, device))
    saved_threads = torch.get_num_threads()
    if ses.threads:
        torch.set_num_threads(ses.threads)
    try:
        return _run(opts, ses, after_step)
    finally:
        torch.set_num_threads(saved_threads)
        dist.close()


def _run(opts: ClaimOptions, ses: Session, after_step) -> dict:
    """Plan, estimate, measure, train, analyse and write: each a function of its own."""
    t0 = time.perf_counter()
    settings = opts.run_settings(progress=ses.progress and ses.n_procs == 1)
    layered = opts.granularity == "layer"
    measured = units = selections = None
    if layered:  # the units and the plasticity-guided set come from the measurement: it goes first
        measured = _measurement(opts, ses, ses.dist.is_main and not opts.dry_run)
        units, selections, trains = _plan_layers(opts, measured)
    else:
        trains = opts.components + (["head"] if opts.baseline == "head" else [])
    prepared = prepare(settings, trains, opts.seed[0])  # the model and data checked once, for every run
    runs = plan_runs(Path(opts.out), settings, trains, opts.lr, opts.seed)
    plan = _plan(opts, runs, trains, units, ses.reporter)
    estimate = None
    if opts.dry_run or opts.time_budget is not None:
        estimate = _estimate(opts, ses, settings, prepared, runs, trains)
    record = opts.record(jobs=ses.n_procs)
    if opts.dry_run:
        return {"config": record, "plan": plan, "estimate": estimate}
    measured = measured or _measurement(opts, ses, ses.dist.is_main)
    t_train = time.perf_counter()
    summaries, lrs = _train(opts, ses, prepared, runs, plan, after_step)
    train_s = time.perf_counter() - t_train
    if layered:
        analysis = analyse_layers(measured, summaries, units=units, selections=selections, lrs=lrs,
                                  seeds=opts.seed, bootstrap=opts.bootstrap, permutations=opts.permutations,
                                  seed=opts.stats_seed)
    else:
        analysis = analyse(measured, summaries, components=opts.components, lrs=lrs, seeds=opts.seed,
                           baseline=opts.baseline, bootstrap=opts.bootstrap, permutations=opts.permutations,
                           seed=opts.stats_seed)
    reused = sum(s["reused"] for s in summaries)
    plan.update(trained=len(summaries) - reused, reused=reused, train_seconds=train_s,
                seconds=time.perf_counter() - t0)
    runs_kept = [{k: s[k] for k in ("train", "lr", "seed", "final_acc", "initial_acc", "trainable_params",
                                    "run_dir", "reused")} for s in summaries]
    measurement = {k: measured[k] for k in ("components", "layers", "pairs", "chunks", "seconds")}
    result = _finite_or_none({"config": record, "plan": plan, "estimate": estimate,
                              "measurement": measurement, "analysis": analysis, "runs": runs_kept})
    result["text"] = format_layer_report(result) if layered else format_report(result)
    _write(result, Path(opts.out), layered, ses)
    return result


def _plan(opts: ClaimOptions, runs: list[PlannedRun], trains: list[str], units, reporter: Reporter) -> dict:
    """The plan's counts (refusing a directory that holds no run), said in one line."""
    foreign = [str(r.spec.directory) for r in runs if r.state == "foreign"]
    if foreign:
        raise ValueError(f"{foreign[0]} is not empty and holds no finetuning run; choose another --out")
    states = {s: sum(r.state == s for r in runs) for s in ("finished", "partial", "new")}
    listing = ", ".join(trains) if units is None else (
        f"{len(units)} (component, layer) units, {len(trains) - len(units) - 1} selections, head")
    reporter.say(f"claim: {len(runs)} finetuning runs = {len(trains)} trained ({listing}) x "
                 f"{len(opts.lr)} learning rates x {len(opts.seed)} seeds, {opts.steps} steps each; "
                 f"{states['finished']} finished, {states['partial']} partial, {states['new']} new")
    return {"runs": len(runs), **states, "trains": trains, "lrs": opts.lr, "seeds": opts.seed,
            "steps": opts.steps}


def _estimate(opts: ClaimOptions, ses: Session, settings: RunSettings, prepared, runs: list[PlannedRun],
              trains: list[str]) -> dict:
    """Short timed runs, the wall time of what remains, and ``--time-budget``'s refusal."""
    if opts.model == DIGITS_MODEL:  # its one-time pretraining is not a finetuning cost
        from ..models.digits import pretrained_digits_vit

        pretrained_digits_vit(progress=ses.progress)
    calib = calibrate(settings, prepared, trains, probe_steps=min(opts.calibrate_steps, opts.steps),
                      threads=ses.threads)
    seconds = estimate_seconds(runs, calib, opts.steps, ses.n_procs)
    procs = f" over {ses.n_procs} processes (if the cores are free)" if ses.n_procs > 1 else ""
    note = "; --lr auto may add runs" if opts.lr_auto else ""
    if opts.granularity == "layer" and opts.steps == LAYER_STEPS:
        note += (f"; a layer claim trains {LAYER_STEPS} steps per run by default ({COMPONENT_STEPS} for a "
                 "component claim) to stay near 10 min on 2 cores")
    todo = sum(r.state != "finished" for r in runs)
    ses.reporter.say(f"estimate: {calib['overhead_s']:.1f} s per run + per step (ms): {_step_text(calib)}; "
                     f"{todo} runs to train: about {seconds / 60:.1f} min{procs} (calibration took "
                     f"{calib['seconds']:.1f} s){note}")
    if opts.time_budget is not None and seconds > 60 * opts.time_budget:
        raise ValueError(f"the estimated {seconds / 60:.1f} min exceed --time-budget {opts.time_budget:g} "
                         "min: fewer --lr/--seed values or --steps")
    return {**calib, "remaining_seconds": seconds, "jobs": ses.n_procs}


def _train(opts: ClaimOptions, ses: Session, prepared, runs: list[PlannedRun], plan: dict, after_step):
    """Every run trained or loaded (``--lr auto``: widened where a best lr sits at an edge); returns
    the summaries and the learning rates run."""
    settings = runs[0].spec.settings

    def train(planned):
        return train_all(planned, prepared, n_procs=ses.n_procs, threads=ses.threads, progress=ses.progress,
                         after_step=after_step)

    summaries, lrs = train(runs), opts.lr
    if opts.lr_auto:
        runs, summaries = train_widening(
            runs, summaries, start=opts.lr, say=ses.reporter.say, train=train,
            plan=lambda t, lr: plan_runs(Path(opts.out), settings, [t], [lr], opts.seed))
        lrs = plan["lrs_run"] = lrs_run(summaries)
    return summaries, lrs


def _write(result: dict, out: Path, layered: bool, ses: Session) -> None:
    """claim.json, claim.txt and claim.png (rank 0), and the report on the reporter."""
    if ses.dist.is_main:
        from vitplast_kernels.atomic_io import atomic_write_bytes

        write_json_atomic(out / "claim.json", {k: v for k, v in result.items() if k != "text"})
        atomic_write_bytes(out / "claim.txt", (result["text"] + "\n").encode())
        (plot_layer_claim if layered else plot_claim)(result, out / "claim.png")
    plan = result["plan"]
    ses.reporter.say(result["text"])
    ses.reporter.say(f"({plan['trained']} runs trained, {plan['reused']} reused, {plan['seconds']:.0f} s; "
                     f"wrote {out / 'claim.json'}, {out / 'claim.txt'}, {out / 'claim.png'})")


def _step_text(calib: dict) -> str:
    """Calibrated step times, trains with the same time grouped (a layer claim has ~25 trains)."""
    groups: dict[str, list[str]] = {}
    for t, v in calib["step_s"].items():
        groups.setdefault(f"{1000 * v:.1f}", []).append(t)
    return ", ".join(f"{', '.join(ts) if len(ts) <= 3 else f'{len(ts)} trains'} {v}"
                     for v, ts in groups.items())


def _plan_layers(opts: ClaimOptions, measured: dict):
    """``(units, selections, trains)`` of a layer-granularity claim: every (component, layer) unit of
    ``--components``, the plasticity-guided and ``--draws`` random sets under ``--budget`` (default:
    twice the largest unit) and the head-only baseline, as ``vitplast finetune --train`` values."""
    from ..finetune import unit_sizes

    built = build_model(opts.model, 10, weights=opts.weights, model_kwargs=opts.model_kwargs,
                        img_size=opts.img_size, progress=False)
    sizes = unit_sizes(built.net)
    units = units_of(measured, opts.components)
    missing = [u for u in units if u not in sizes]
    if missing:
        raise ValueError(f"the component map of {opts.model} has no {unit_name(missing[0])}")
    selections = None
    if opts.draws:
        budget = opts.budget or default_budget({u: sizes[u] for u in units})
        selections = plan_selections(measured, units, sizes, budget, opts.draws, opts.stats_seed)
    names = [unit_name(u) for u in units]
    extra = [] if selections is None else (
        [selections["auto"]["train"]] + [s["train"] for s in selections["random"]])
    return units, selections, list(dict.fromkeys(names + extra + ["head"]))


def _finite_or_none(obj):
    """``obj`` with every non-finite float replaced by None (strict JSON; the reports print "nan")."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj
