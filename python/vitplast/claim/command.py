"""Does plasticity predict which component to finetune? The paper's claim, tested in one command.

For a model, a pretraining-side dataset X and a downstream dataset Y:

1. measure every component's plasticity *before* finetuning on matched X-Y pairs (``--protocol
   in_situ`` or ``decomposition``), in chunks that the bootstrap resamples;
2. finetune each component alone (plus the head) on Y under one budget: the same steps, batch,
   optimiser, learning-rate grid and seeds for every component, through `vitplast finetune`'s driver
   (one run directory per run under OUT/runs/), and the head alone as the baseline;
3. report per component: plasticity with its CI, trainable parameters, accuracy and gain over the
   baseline with CIs across seeds, then Spearman's rho and Kendall's tau-b between plasticity and gain
   with a bootstrap CI (seeds and pairs resampled) and exact permutation p-values.

Per layer the claim is plasticity-only: the finetune driver trains a component in every block, so
gains exist per component type; plasticity is reported per layer too.

Defaults: the embedded digits ViT (pretrained here on digits 0-4), X = digits 0-4, Y = digits 5-9.
A killed claim continues where it stopped when run again with the same options (finished runs are
loaded, partial ones resume from their last checkpoint). Writes OUT/claim.json, claim.txt, claim.png.

examples:
  vitplast claim --out runs/claim
  vitplast claim --out runs/claim --dry-run           # how many runs, how long on this machine
  vitplast claim --model vit_small_patch16_224 --weights vit_s.safetensors --img-size 224 \\
      --pretrain-data in1k_val/ --data flowers/ --device cuda --amp bf16 --batch-size 128 \\
      --steps 500 --lr 1e-4,3e-4,1e-3 --seed 0,1,2 --out runs/claim_flowers
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from ..options.parsing import fail
from ..runtime.device import resolve_device
from ..runtime.distributed import init_distributed, silent
from ..models.builder import DIGITS_MODEL, build_model
from ..runs.rundir import write_json_atomic
from .analysis import analyse
from .layer_report import format_layer_report, plot_layers
from .layers import analyse_layers, default_budget, plan_selections, unit_name, units_of
from .lr_auto import lrs_run, train_widening
from .options import (
    COMPONENT_STEPS,
    FINETUNE_KEYS,
    LAYER_STEPS,
    add_arguments,
    options_from_args,
    resolve_options,
)

__all__ = ["add_arguments", "claim", "run"]  # add_arguments and run: the CLI's (vitplast.cli)
from .plasticity import measure_chunks
from .report import format_report, plot_claim
from .runs import calibrate, estimate_seconds, plan_runs, train_all


def _threads(cfg: dict, device) -> int | None:
    """``--threads``, else 1 for the digits ViT on CPU (its matrices are tiny: on a loaded 2-core
    machine one thread measured 60 ms per training step, two threads 1080 ms), else torch's default."""
    if cfg["threads"] is not None:
        return cfg["threads"]
    return 1 if cfg["model"] == DIGITS_MODEL and device.type == "cpu" else None


def _jobs(cfg: dict, device) -> int:
    """``--jobs``, else one process per core up to 2 for the digits ViT on CPU (one thread each),
    else 1 (a large model uses the cores, or the GPU, within one run)."""
    if cfg["jobs"] is not None:
        return cfg["jobs"]
    if cfg["model"] == DIGITS_MODEL and device.type == "cpu" and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return max(1, min(2, os.cpu_count() or 1))
    return 1


def _measurement(cfg: dict, out: Path, device, progress: bool, is_main: bool, say) -> dict:
    """Plasticity chunks: loaded from OUT/plasticity_chunks.json when measured with these options,
    else measured (and saved)."""
    import contextlib

    import torch

    from ..data.datasets import load_dataset

    keys = ("model", "weights", "model_kwargs", "img_size", "pretrain_data", "data", "split", "protocol",
            "pairs", "pair_batch", "measure_seed", "amp")
    config = {**{k: cfg[k] for k in keys}, "model_seed": cfg["seed"][0]}
    path = out / "plasticity_chunks.json"
    if path.exists():
        saved = json.loads(path.read_text())
        if saved["config"] != config:
            diffs = [k for k in config if saved["config"].get(k) != config[k]]
            raise ValueError(f"--out {out} holds a claim measured with other options ({', '.join(diffs)}); "
                             "choose another --out")
        say(f"plasticity: loaded from {path}")
        return saved
    n_classes = load_dataset(cfg["data"], "val", img_size=cfg["img_size"] or 32, seed=0).num_classes
    with torch.random.fork_rng(devices=[]):  # a random-init model is the one seed[0]'s run starts from
        torch.manual_seed(cfg["seed"][0])
        built = build_model(cfg["model"], n_classes, weights=cfg["weights"], model_kwargs=cfg["model_kwargs"],
                            img_size=cfg["img_size"], progress=progress)
    net, img_size = built.net, built.img_size
    x_set = load_dataset(cfg["pretrain_data"], cfg["split"], img_size=img_size, seed=cfg["measure_seed"])
    y_set = load_dataset(cfg["data"], cfg["split"], img_size=img_size, seed=cfg["measure_seed"])
    amp = (lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)) if cfg["amp"] == "bf16" \
        else contextlib.nullcontext
    measured = measure_chunks(net, x_set, y_set, protocol=cfg["protocol"], pairs=cfg["pairs"],
                              pair_batch=cfg["pair_batch"], seed=cfg["measure_seed"], device=device,
                              amp=amp, progress=progress)
    measured["config"] = config
    if is_main:
        write_json_atomic(path, measured)
    say(f"plasticity: {measured['pairs']} matched pairs in {measured['chunks']} chunks, "
        f"{measured['seconds']:.1f} s")
    return measured


def claim(**options) -> dict:
    """Run the claim described by ``options`` (the CLI's options, underscores for dashes:
    ``components="MHA,FC1,LN1"``, ``lr="1e-3,3e-3"``, ``seed="0,1,2"``, ``steps=100``, ``out=DIR``...).

    Returns ``{"config", "plan", "estimate", "measurement", "analysis", "runs", "text"}`` (a dry run:
    only ``config``, ``plan`` and ``estimate``). Writes OUT/claim.json, OUT/claim.txt, OUT/claim.png.
    """
    import torch

    cfg = resolve_options(options)
    say = options.get("_say", print)
    out = Path(cfg["out"])
    dist = init_distributed(cfg["device"])  # the claim's process group: each finetune run joins it
    if not dist.is_main:
        say = silent
    progress = (cfg["progress"] if cfg["progress"] is not None else sys.stderr.isatty()) and dist.is_main
    device = resolve_device(cfg["device"], dist.local_rank if dist.enabled else None)
    threads = _threads(cfg, device)
    cfg["jobs"] = n_procs = _jobs(cfg, device)
    saved_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        layered = cfg["granularity"] == "layer"
        measured = units = selections = None
        if layered:  # the units and the plasticity-guided set come from the measurement: it goes first
            measured = _measurement(cfg, out, device, progress, dist.is_main and not cfg["dry_run"], say)
            units, selections, trains = _plan_layers(cfg, measured)
        else:
            trains = cfg["components"] + (["head"] if cfg["baseline"] == "head" else [])
        jobs = plan_runs(out, trains, cfg["lr"], cfg["seed"])
        foreign = [str(j["path"]) for j in jobs if j["state"] == "foreign"]
        if foreign:
            raise ValueError(f"{foreign[0]} is not empty and holds no finetuning run; choose another --out")
        states = {s: sum(j["state"] == s for j in jobs) for s in ("finished", "partial", "new")}
        plan = {"runs": len(jobs), **states, "trains": trains, "lrs": cfg["lr"], "seeds": cfg["seed"],
                "steps": cfg["steps"]}
        listing = ", ".join(trains) if not layered else (
            f"{len(units)} (component, layer) units, {len(trains) - len(units) - 1} selections, head")
        say(f"claim: {len(jobs)} finetuning runs = {len(trains)} trained ({listing}) x "
            f"{len(cfg['lr'])} learning rates x {len(cfg['seed'])} seeds, {cfg['steps']} steps each; "
            f"{states['finished']} finished, {states['partial']} partial, {states['new']} new")
        base = {k: cfg[k] for k in FINETUNE_KEYS}
        base.update(monitor_every=0, plots=cfg["run_plots"], progress=progress and n_procs == 1)
        estimate = None
        if cfg["dry_run"] or cfg["time_budget"] is not None:
            if cfg["model"] == DIGITS_MODEL:  # its one-time pretraining is not a finetuning cost
                from ..models.digits import pretrained_digits_vit

                pretrained_digits_vit(progress=progress)
            calib = calibrate({**base, "progress": False}, trains, probe_steps=min(cfg["calibrate_steps"],
                              cfg["steps"]), threads=threads)
            seconds = estimate_seconds(jobs, calib, cfg["steps"], n_procs)
            estimate = {**calib, "remaining_seconds": seconds, "jobs": n_procs}
            procs = f" over {n_procs} processes (if the cores are free)" if n_procs > 1 else ""
            note = "; --lr auto may add runs" if cfg["lr_auto"] else ""
            if layered and options.get("steps") is None:
                note += (f"; a layer claim trains {LAYER_STEPS} steps per run by default ({COMPONENT_STEPS} "
                         "for a component claim) to stay near 10 min on 2 cores")
            say(f"estimate: {calib['overhead_s']:.1f} s per run + per step (ms): {_step_text(calib)}; "
                f"{states['partial'] + states['new']} runs to train: about {seconds / 60:.1f} min{procs} "
                f"(calibration took {calib['seconds']:.1f} s){note}")
            if cfg["time_budget"] is not None and seconds > 60 * cfg["time_budget"]:
                raise ValueError(f"the estimated {seconds / 60:.1f} min exceed --time-budget "
                                 f"{cfg['time_budget']:g} min: fewer --lr/--seed values or --steps")
        public = {k: v for k, v in cfg.items() if not k.startswith("_")}
        if cfg["dry_run"]:
            return {"config": public, "plan": plan, "estimate": estimate}

        measured = measured or _measurement(cfg, out, device, progress, dist.is_main, say)
        t_train = time.perf_counter()
        def train(js):
            return train_all(js, base, n_procs=n_procs, threads=threads, progress=progress,
                             stop_after=options.get("_stop_after"))

        summaries, lrs = train(jobs), cfg["lr"]
        if cfg["lr_auto"]:  # widen each train's grid where its best lr sits at an edge
            jobs, summaries = train_widening(jobs, summaries, start=cfg["lr"], say=say, train=train,
                                             plan=lambda t, lr: plan_runs(out, [t], [lr], cfg["seed"]))
            lrs = plan["lrs_run"] = lrs_run(summaries)
        train_s = time.perf_counter() - t_train
        if layered:
            analysis = analyse_layers(measured, summaries, units=units, selections=selections, lrs=lrs,
                                      seeds=cfg["seed"], bootstrap=cfg["bootstrap"],
                                      permutations=cfg["permutations"], seed=cfg["stats_seed"])
        else:
            analysis = analyse(measured, summaries, components=cfg["components"], lrs=lrs,
                               seeds=cfg["seed"], baseline=cfg["baseline"], bootstrap=cfg["bootstrap"],
                               permutations=cfg["permutations"], seed=cfg["stats_seed"])
        runs = [{k: s[k] for k in ("train", "lr", "seed", "final_acc", "initial_acc", "trainable_params",
                                   "run_dir", "reused")} for s in summaries]
        reused = sum(s["reused"] for s in summaries)
        plan.update(trained=len(summaries) - reused, reused=reused, train_seconds=train_s,
                    seconds=time.perf_counter() - t0)
        measurement = {k: measured[k] for k in ("components", "layers", "pairs", "chunks", "seconds")}
        result = _finite_or_none({"config": public, "plan": plan, "estimate": estimate,
                                  "measurement": measurement, "analysis": analysis, "runs": runs})
        result["text"] = format_layer_report(result) if layered else format_report(result)
        if dist.is_main:
            write_json_atomic(out / "claim.json", {k: v for k, v in result.items() if k != "text"})
            text = result["text"] + "\n"
            from vitplast_kernels.atomic_io import atomic_write_bytes

            atomic_write_bytes(out / "claim.txt", text.encode())
            (plot_layers if layered else plot_claim)(result, out / "claim.png")
        say(result["text"])
        say(f"({plan['trained']} runs trained, {plan['reused']} reused, {plan['seconds']:.0f} s; wrote "
            f"{out / 'claim.json'}, {out / 'claim.txt'}, {out / 'claim.png'})")
        return result
    finally:
        torch.set_num_threads(saved_threads)
        dist.close()


def _step_text(calib: dict) -> str:
    """Calibrated step times, trains with the same time grouped (a layer claim has ~25 trains)."""
    groups: dict[str, list[str]] = {}
    for t, v in calib["step_s"].items():
        groups.setdefault(f"{1000 * v:.1f}", []).append(t)
    return ", ".join(f"{', '.join(ts) if len(ts) <= 3 else f'{len(ts)} trains'} {v}"
                     for v, ts in groups.items())


def _plan_layers(cfg: dict, measured: dict):
    """``(units, selections, trains)`` of a layer-granularity claim: every (component, layer) unit of
    ``--components``, the plasticity-guided and ``--draws`` random sets under ``--budget`` (default:
    twice the largest unit) and the head-only baseline, as ``vitplast finetune --train`` values."""
    from ..finetune import unit_sizes

    built = build_model(cfg["model"], 10, weights=cfg["weights"], model_kwargs=cfg["model_kwargs"],
                        img_size=cfg["img_size"], progress=False)
    sizes = unit_sizes(built.net)
    units = units_of(measured, cfg["components"])
    missing = [u for u in units if u not in sizes]
    if missing:
        raise ValueError(f"the component map of {cfg['model']} has no {unit_name(missing[0])}")
    selections = None
    if cfg["draws"]:
        budget = cfg["budget"] or default_budget({u: sizes[u] for u in units})
        selections = plan_selections(measured, units, sizes, budget, cfg["draws"], cfg["stats_seed"])
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


def run(args: argparse.Namespace) -> int:
    try:
        claim(**options_from_args(args))
    except (ValueError, FileNotFoundError, ImportError) as exc:
        return fail("vitplast claim", exc)
    return 0
