"""Options of `vitplast claim`: defaults, and their validation into one resolved configuration.

Every problem is a ``ValueError`` whose message names the option (the CLI prints it on one line and
exits with status 2) and is found before anything is measured or trained.
"""

from __future__ import annotations

import math
import os

from ..common.arg_types import check_seed, check_steps
from ..common.device import check_device
from ..common.model_builder import DIGITS_MODEL, check_digits_options
from ..common.paths import check_out_dir, foreign_files
from ..finetune import COMPONENTS

PROTOCOLS = ("in_situ", "decomposition")
BASELINES = ("head", "initial")
GRANULARITIES = ("component", "layer")
COMPONENT_STEPS, LAYER_STEPS = 100, 60  # default --steps per granularity

DEFAULTS: dict = {
    "model": DIGITS_MODEL, "weights": None, "model_kwargs": {}, "img_size": None,
    "pretrain_data": "digits:0-4", "data": "digits:5-9", "split": "all",
    "protocol": "in_situ", "pairs": 512, "pair_batch": 16, "measure_seed": 0,
    "components": ",".join(COMPONENTS), "baseline": "head", "granularity": "component", "budget": None,
    "draws": 3,
    "optimizer": "adam", "lr": "3e-3,1e-2,3e-2", "seed": "0,1,2", "steps": None, "batch_size": 64,
    "weight_decay": 0.0, "schedule": "cosine", "amp": "none", "device": "auto", "eval_limit": 0,
    "checkpoint_every": 50, "run_plots": False,
    "jobs": None, "threads": None,
    "bootstrap": 2000, "permutations": 10000, "stats_seed": 0,
    "out": None, "dry_run": False, "time_budget": None, "calibrate_steps": 10, "progress": None,
}
# options passed on unchanged to every finetune run
FINETUNE_KEYS = ("model", "weights", "model_kwargs", "img_size", "data", "optimizer", "weight_decay",
                 "schedule", "steps", "batch_size", "amp", "device", "eval_limit", "checkpoint_every")


def _list(value, cast, name: str) -> list:
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out = []
    for item in items:
        text = str(item).strip()
        try:
            out.append(cast(text))
        except ValueError:
            raise ValueError(f"--{name}: cannot read {text!r} as {cast.__name__}") from None
    if len(set(out)) != len(out):
        raise ValueError(f"--{name}: repeated value in {value!r}")
    return out


def _positive_int(cfg: dict, key: str, minimum: int = 1) -> None:
    v = cfg[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ValueError(f"--{key.replace('_', '-')} must be an integer >= {minimum}, got {v!r}")


def resolve_options(options: dict) -> dict:
    """Defaults filled in and every option validated; raises ValueError naming the option."""
    unknown = sorted(k for k in options if k not in DEFAULTS and not k.startswith("_"))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; known: {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
    if cfg["steps"] is None:  # a layer claim trains 4-5x more runs: fewer steps keep it in budget
        cfg["steps"] = LAYER_STEPS if cfg["granularity"] == "layer" else COMPONENT_STEPS
    if cfg["out"] is None:
        raise ValueError("--out DIR is required: it holds the finetuning runs and the reports")
    cfg["out"] = str(cfg["out"])
    comps = _list(cfg["components"], str, "components")
    lookup = {c.lower(): c for c in COMPONENTS}
    bad = [c for c in comps if c.lower() not in lookup]
    if bad:
        raise ValueError(f"--components: unknown {bad}; choose from {', '.join(COMPONENTS)}")
    cfg["components"] = [lookup[c.lower()] for c in comps]
    if len(cfg["components"]) < 3 and cfg["granularity"] != "layer":  # layer: units = components x layers
        raise ValueError(f"--components: a rank correlation needs at least 3 components, got "
                         f"{cfg['components']}")
    cfg["lr_auto"] = str(cfg["lr"]).strip().lower() == "auto"
    cfg["lr"] = _list(DEFAULTS["lr"] if cfg["lr_auto"] else cfg["lr"], float, "lr")
    if any(not (v > 0 and math.isfinite(v)) for v in cfg["lr"]):
        raise ValueError(f"--lr values must be positive, got {cfg['lr']}")
    cfg["seed"] = _list(cfg["seed"], int, "seed")
    for seed in cfg["seed"]:
        check_seed(seed)
    for key in ("measure_seed", "stats_seed"):
        check_seed(cfg[key], f"--{key.replace('_', '-')}")
    for key in ("steps", "batch_size", "pairs", "pair_batch", "bootstrap", "permutations", "calibrate_steps"):
        _positive_int(cfg, key)
    check_steps(cfg["steps"])
    if cfg["jobs"] is not None:
        _positive_int(cfg, "jobs")
        cores = os.cpu_count() or 1
        if cfg["jobs"] > cores:
            raise ValueError(f"--jobs {cfg['jobs']}: at most one run per core ({cores} on this machine)")
    for key in ("eval_limit", "checkpoint_every"):
        _positive_int(cfg, key, 0)
    if cfg["threads"] is not None:
        _positive_int(cfg, "threads")
    if cfg["pairs"] < cfg["pair_batch"]:
        raise ValueError(f"--pairs ({cfg['pairs']}) must be at least --pair-batch ({cfg['pair_batch']})")
    choices = {"protocol": PROTOCOLS, "baseline": BASELINES, "optimizer": ("sgd", "adam"),
               "schedule": ("constant", "cosine"), "amp": ("none", "bf16"), "split": ("train", "val", "all")}
    for key, allowed in choices.items():
        if cfg[key] not in allowed:
            raise ValueError(f"--{key.replace('_', '-')} must be one of {allowed}, got {cfg[key]!r}")
    if cfg["granularity"] not in GRANULARITIES:
        raise ValueError(f"--granularity must be one of {GRANULARITIES}, got {cfg['granularity']!r}")
    if cfg["granularity"] == "layer" and cfg["baseline"] != "head":
        raise ValueError("--granularity layer compares every unit with the head-only run: --baseline head")
    _positive_int(cfg, "draws", 0)
    if cfg["budget"] is not None:
        _positive_int(cfg, "budget")
        if cfg["granularity"] != "layer":
            raise ValueError("--budget only applies to --granularity layer (the selected sets' size)")
    if cfg["time_budget"] is not None and not cfg["time_budget"] > 0:
        raise ValueError(f"--time-budget must be a positive number of minutes, got {cfg['time_budget']}")
    if cfg["weight_decay"] < 0:
        raise ValueError(f"--weight-decay must be >= 0, got {cfg['weight_decay']}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and (cfg["jobs"] or 1) > 1:
        raise ValueError("--jobs must be 1 under torchrun (each run is already data-parallel)")
    if cfg["model"] == DIGITS_MODEL:
        check_digits_options(cfg["model_kwargs"], cfg["img_size"])
    check_claim_out(cfg["out"])
    try:
        check_device(cfg["device"])
    except ValueError as exc:
        raise ValueError(f"--device: {exc}") from None
    return cfg


# what a claim writes into OUT (and nothing else: another directory is refused, never written into)
CLAIM_FILES = frozenset({"runs", "plasticity_chunks.json", "claim.json", "claim.txt", "claim.png"})


def check_claim_out(out: str) -> None:
    """``--out``: a new or empty directory, or one a claim wrote (its files only); ValueError otherwise."""
    check_out_dir(out)
    foreign = [n for n in foreign_files(out, CLAIM_FILES) if not n.startswith(".")]  # hidden: temporaries
    if foreign:
        raise ValueError(f"--out {out!r} holds files a claim did not write ({', '.join(foreign[:5])}"
                         f"{' ...' if len(foreign) > 5 else ''}): give a new or empty directory, or one an "
                         "earlier claim wrote")
