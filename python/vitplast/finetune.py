"""Finetune chosen components of a vision transformer, monitoring their plasticity every few steps.

The paper's component-wise protocol: ``--train MHA`` trains attention in every block (plus the head),
``--train FC1``/``FC2``/``LN1``/``LN2`` likewise; ``full``, ``head`` (linear probing) and ``lora``
(peft LoRA on attention) are the baselines; ``auto --budget N`` measures plasticity first and trains
the most plastic components that fit N trainable parameters. Comma-separated ``--train``, ``--lr``
and ``--seed`` values form a grid, run in sequence and aggregated into mean +- std accuracy per
trained component.

Defaults are the embedded example: the digits ViT pretrained on digits 0-4 (``--model digits-vit``)
finetuned on digits 5-9, each of the five components in turn:

    vitplast finetune --out runs/digits

Each run directory holds config.json, metrics.jsonl (monitor, eval and train records), checkpoint.pt
(atomic), summary.json (finished marker) and plots/. ``--resume`` continues a killed run exactly;
a finished directory is never overwritten. Under ``torchrun --nproc-per-node N`` the run is
data-parallel (gloo on CPU, nccl on GPU) and metrics and plasticity are combined over ranks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from .finetune_dist import DistContext, init_distributed
from .rundir import RunDir, RunDirError, rng_state, set_rng_state, write_json_atomic
from .trainable import COMPONENTS, TRAIN_CHOICES, parse_train

DEFAULT_MODEL = "digits-vit"  # the embedded default (vitplast.digits.pretrained_digits_vit)
OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "cosine")
AMP_CHOICES = ("none", "bf16")

DEFAULTS: dict = {
    "model": DEFAULT_MODEL,
    "model_kwargs": {},
    "weights": None,
    "data": "digits:5-9",
    "img_size": None,
    "train": ",".join(COMPONENTS),
    "budget": None,
    "auto_batches": 4,
    "lora_r": 8,
    "optimizer": "adam",
    "lr": "1e-3",
    "weight_decay": 0.0,
    "schedule": "cosine",
    "warmup": 0,
    "grad_clip": None,
    "steps": 150,
    "batch_size": 64,
    "seed": "0",
    "amp": "none",
    "device": "auto",
    "eval_every": 0,
    "eval_limit": 0,
    "monitor_every": 10,
    "probe": 0,
    "checkpoint_every": 50,
    "out": None,
    "resume": False,
    "tensorboard": False,
    "progress": None,
    "plots": True,
    "workers": 0,
}


class SimulatedKill(BaseException):
    """Raised by the ``_stop_after`` test hook: the run stops as if killed (nothing more written)."""


# ------------------------------------------------------------------------------------------ options
def _split(value, cast, name: str) -> list:
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out = []
    for item in items:
        text = str(item).strip()
        if not text:
            raise ValueError(f"--{name}: empty value in {value!r}")
        try:
            out.append(cast(text) if isinstance(item, str) else cast(item))
        except ValueError:
            raise ValueError(f"--{name}: cannot read {text!r} as {cast.__name__}") from None
    return out


def resolve_options(options: dict) -> dict:
    """Defaults filled in and every option validated; raises ValueError naming the option."""
    unknown = sorted(k for k in options if k not in DEFAULTS and not k.startswith("_"))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; known: {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None or k == "grad_clip"}}
    if cfg["out"] is None:
        raise ValueError("--out DIR is required: the run directory (config, metrics, checkpoints, plots)")
    cfg["out"] = str(cfg["out"])
    trains = _split(cfg["train"], str, "train")
    for t in trains:
        parse_train(t)
    lrs = _split(cfg["lr"], float, "lr")
    seeds = _split(cfg["seed"], int, "seed")
    if any(not (lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise ValueError(f"--lr must be positive, got {cfg['lr']}")
    cfg["train"], cfg["lr"], cfg["seed"] = trains, lrs, seeds
    for key in ("steps", "batch_size"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise ValueError(f"--{key.replace('_', '-')} must be a positive integer, got {cfg[key]!r}")
    for key in ("eval_every", "monitor_every", "probe", "checkpoint_every", "warmup", "eval_limit",
                "workers"):
        if not isinstance(cfg[key], int) or cfg[key] < 0:
            raise ValueError(f"--{key.replace('_', '-')} must be an integer >= 0, got {cfg[key]!r}")
    if cfg["optimizer"] not in OPTIMIZERS:
        raise ValueError(f"--optimizer must be one of {OPTIMIZERS}, got {cfg['optimizer']!r}")
    if cfg["schedule"] not in SCHEDULES:
        raise ValueError(f"--schedule must be one of {SCHEDULES}, got {cfg['schedule']!r}")
    if cfg["amp"] not in AMP_CHOICES:
        raise ValueError(f"--amp must be one of {AMP_CHOICES}, got {cfg['amp']!r}")
    if cfg["grad_clip"] is not None and not cfg["grad_clip"] > 0:
        raise ValueError(f"--grad-clip must be positive (or omitted), got {cfg['grad_clip']}")
    if cfg["probe"] % 2:
        raise ValueError(f"--probe must be an even number of images (pairs = halves), got {cfg['probe']}")
    if cfg["monitor_every"] and not cfg["probe"] and cfg["batch_size"] % 2:
        raise ValueError(
            f"--batch-size must be even to monitor on the training batch (pairs = its halves), got "
            f"{cfg['batch_size']}; or pass --probe N"
        )
    if any(parse_train(t) == ("auto",) for t in trains):
        if cfg["budget"] is None:
            raise ValueError("--train auto needs --budget N (the number of trainable parameters allowed)")
        if not isinstance(cfg["budget"], int) or cfg["budget"] < 1:
            raise ValueError(f"--budget must be a positive integer, got {cfg['budget']!r}")
    elif cfg["budget"] is not None:
        raise ValueError("--budget only applies to --train auto")
    if cfg["weight_decay"] < 0:
        raise ValueError(f"--weight-decay must be >= 0, got {cfg['weight_decay']}")
    dev = str(cfg["device"])
    if dev != "auto":
        try:
            torch.device(dev)
        except RuntimeError:
            raise ValueError(f"--device: not a device: {dev!r} (auto, cpu, cuda, cuda:1, ...)") from None
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {dev}: CUDA is not available on this machine")
    if cfg["tensorboard"]:
        _tensorboard_writer_class()  # fail before any directory is made
    if any(parse_train(t) == ("lora",) for t in trains):
        from .trainable import _import_peft

        _import_peft()
    if cfg["model"] == DEFAULT_MODEL:
        from .digits import DigitsConfig

        size = DigitsConfig().img_size
        if cfg["img_size"] not in (None, size):
            raise ValueError(f"--img-size {cfg['img_size']}: {DEFAULT_MODEL} takes {size}x{size} images")
        if cfg["model_kwargs"]:
            raise ValueError(f"--model-arg does not apply to {DEFAULT_MODEL} (its architecture is fixed)")
    if not isinstance(cfg["model_kwargs"], dict):
        raise ValueError(f"model_kwargs must be a dict, got {type(cfg['model_kwargs']).__name__}")
    return cfg


def _device(cfg: dict, dctx: DistContext) -> torch.device:
    dev = cfg["device"]
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cuda" and dctx.enabled:
        dev = f"cuda:{dctx.local_rank}"
    return torch.device(dev)


def _amp_factory(cfg: dict, device: torch.device):
    if cfg["amp"] == "bf16":
        return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


# ------------------------------------------------------------------------------------------ data
class StepBatches:
    """Global batch of iteration ``it`` as a pure function of ``(seed, it)``: epoch ``e`` visits the
    training set in ``randperm(seed, e)`` order, incomplete last batches are dropped. Rank ``r`` of
    ``w`` takes sequences ``r, r + w, ...`` of the global batch, so the data order needs no saving
    beyond the iteration number, and a resumed run sees exactly the batches it would have seen."""

    def __init__(self, dataset, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        self.rank, self.world = rank, world
        self.n = len(dataset)
        if batch_size > self.n:
            raise ValueError(f"--batch-size {batch_size} exceeds the training set ({self.n} images)")
        if batch_size % world:
            raise ValueError(f"--batch-size {batch_size} must be divisible by the {world} processes")
        self.per_epoch = self.n // batch_size
        self._perm_epoch, self._perm = -1, None
        self._tensors = (getattr(dataset, "images", None), getattr(dataset, "labels", None))

    def indices(self, it: int) -> torch.Tensor:
        epoch, k = divmod(it, self.per_epoch)
        if epoch != self._perm_epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm, self._perm_epoch = torch.randperm(self.n, generator=g), epoch
        return self._perm[k * self.batch_size : (k + 1) * self.batch_size][self.rank :: self.world]

    def get(self, it: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = self.indices(it)
        images, labels = self._tensors
        if isinstance(images, torch.Tensor) and isinstance(labels, torch.Tensor):
            return images[idx], labels[idx]
        items = [self.dataset[int(i)] for i in idx]
        return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items], dtype=torch.long)

    def iterate(self, start: int, stop: int, workers: int = 0):
        """``(it, images, labels)`` for ``it`` in ``[start, stop)``; ``workers`` > 0 loads ahead."""
        if workers == 0 or isinstance(self._tensors[0], torch.Tensor):
            for it in range(start, stop):
                yield (it, *self.get(it))
            return
        from torch.utils.data import DataLoader

        sampler = [self.indices(it).tolist() for it in range(start, stop)]
        loader = DataLoader(self.dataset, batch_sampler=sampler, num_workers=workers)
        for it, (x, y) in zip(range(start, stop), loader, strict=True):
            yield it, x, y


def _eval_batches(dataset, limit: int, batch_size: int, rank: int, world: int):
    n = len(dataset) if not limit else min(limit, len(dataset))
    idx = torch.arange(rank, n, world)
    images, labels = getattr(dataset, "images", None), getattr(dataset, "labels", None)
    for s in range(0, idx.numel(), batch_size):
        part = idx[s : s + batch_size]
        if isinstance(images, torch.Tensor) and isinstance(labels, torch.Tensor):
            yield images[part], labels[part]
        else:
            items = [dataset[int(i)] for i in part]
            yield torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])


def evaluate(model, dataset, device, *, limit=0, batch_size=256, dctx=None, amp=contextlib.nullcontext):
    """``(accuracy, mean loss)`` on ``dataset`` (first ``limit`` items when > 0), summed over ranks."""
    dctx = dctx or DistContext()
    was = model.training
    model.eval()
    tot = torch.zeros(3, dtype=torch.float64, device=device)  # correct, count, loss sum
    with torch.no_grad():
        for x, y in _eval_batches(dataset, limit, batch_size, dctx.rank, dctx.world):
            x, y = x.to(device), y.to(device)
            with amp():
                logits = model(x)
            logits = logits.float()
            tot[0] += (logits.argmax(-1) == y).sum()
            tot[1] += y.numel()
            tot[2] += torch.nn.functional.cross_entropy(logits, y, reduction="sum").double()
    model.train(was)
    correct, count, loss = dctx.sum_(tot).tolist()
    return (correct / count, loss / count) if count else (float("nan"), float("nan"))


# ------------------------------------------------------------------------------------------ model
def _load_data(cfg: dict, seed: int, img_size: int):
    from .data import load_dataset

    return (load_dataset(cfg["data"], "train", img_size=img_size, seed=seed),
            load_dataset(cfg["data"], "val", img_size=img_size, seed=seed))


def build_model(cfg: dict, num_classes: int) -> torch.nn.Module:
    """The model named by ``cfg["model"]`` with a fresh ``num_classes`` head (drawn from the torch RNG)."""
    if cfg["model"] == DEFAULT_MODEL:
        from .digits import build_digits_vit, pretrained_digits_vit

        if cfg["weights"]:
            model = build_digits_vit(weights=cfg["weights"])
        else:
            model = pretrained_digits_vit(progress=False)
        model.reset_classifier(num_classes)
        return model
    import warnings

    from .models import create_vit

    with warnings.catch_warnings():
        if cfg["weights"] is None:
            warnings.filterwarnings("ignore", message=".*no weights given.*")
        return create_vit(cfg["model"], num_classes, img_size=cfg["img_size"], weights=cfg["weights"],
                          **cfg["model_kwargs"])


def _img_size(model, cfg) -> int:
    if cfg["img_size"]:
        return int(cfg["img_size"])
    size = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if size is None:
        raise ValueError(f"--img-size is needed: cannot read the input size of {type(model).__name__}")
    return int(size[0] if isinstance(size, (tuple, list)) else size)


def _schedule(cfg: dict):
    steps, warmup = cfg["steps"], cfg["warmup"]

    def factor(it: int) -> float:
        if it < warmup:
            return (it + 1) / warmup
        if cfg["schedule"] == "constant":
            return 1.0
        t = (it - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return factor


# ------------------------------------------------------------------------------------------ one run
def run_one(cfg: dict, train: str, lr: float, seed: int, run_path: Path, dctx: DistContext,
            say=print) -> dict:
    """Train one (train, lr, seed) combination into ``run_path``; returns its summary dict."""
    from .monitor import Monitor, component_means, measure_plasticity
    from .trainable import apply_lora, choose_components, count_parameters, select_trainable

    run_cfg = {k: v for k, v in cfg.items() if k not in ("train", "lr", "seed") and not k.startswith("_")}
    run_cfg.update(train=train, lr=lr, seed=seed)
    rd = RunDir(run_path, writer=dctx.is_main)
    err = None
    if dctx.is_main:
        try:
            rd.open(run_cfg, resume=cfg["resume"])
        except RunDirError as exc:
            err = str(exc)
    err = dctx.broadcast_object(err)
    if err:
        raise RunDirError(err)
    if not dctx.is_main:
        rd.open(run_cfg, resume=True)  # read-only: the checkpoint rank 0 validated
    if rd.finished:
        say(f"{run_path}: already finished, loading its summary")
        return rd.summary()

    t0 = time.perf_counter()
    device = _device(cfg, dctx)
    amp = _amp_factory(cfg, device)
    torch.manual_seed(seed)
    probe_ds, _ = _load_data(cfg, seed, cfg["img_size"] or 32)
    model = build_model(cfg, probe_ds.num_classes)
    img_size = _img_size(model, cfg)
    train_ds, val_ds = _load_data(cfg, seed, img_size)
    model.to(device).train()
    feed = StepBatches(train_ds, cfg["batch_size"], seed, dctx.rank, dctx.world)
    if cfg["monitor_every"] and not cfg["probe"] and (cfg["batch_size"] // dctx.world) % 2:
        local = cfg["batch_size"] // dctx.world
        raise ValueError(f"--batch-size {cfg['batch_size']} gives {local} images per process: must be even "
                         "to monitor on the training batch halves (or pass --probe N)")
    ckpt = rd.checkpoint
    parts = parse_train(train)
    chosen = None
    if parts == ("auto",):
        if ckpt is not None and "auto" in ckpt:
            auto = ckpt["auto"]
        else:
            batches = [feed.get(i)[0].to(device) for i in range(cfg["auto_batches"])]
            means = component_means(measure_plasticity(model, batches, dist=dctx, amp=amp))
            auto = {"plasticity": means, "chosen": choose_components(means, model, cfg["budget"])}
            rd.log({"kind": "auto", "iter": -1, "step": 0, **auto, "budget": cfg["budget"]})
        chosen = auto["chosen"]
        say(f"--train auto (budget {cfg['budget']}): plasticity "
            + ", ".join(f"{c} {v:.3f}" for c, v in auto["plasticity"].items())
            + f" -> training {'+'.join(chosen) or 'head only'}")
        parts = tuple(chosen) or ("head",)
    if parts == ("lora",):
        model = apply_lora(model, r=cfg["lora_r"])
        names = [n for n, p in model.named_parameters() if p.requires_grad]
    else:
        names = select_trainable(model, parts)
    n_train = count_parameters(model, names)
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg["optimizer"] == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=cfg["weight_decay"])
    else:
        opt = torch.optim.Adam(params, lr=lr, weight_decay=cfg["weight_decay"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cfg))
    probe = None
    if cfg["probe"]:
        g = torch.Generator().manual_seed(12345)
        pick = torch.randperm(len(train_ds), generator=g)[: cfg["probe"]]
        if pick.numel() < cfg["probe"]:
            raise ValueError(f"--probe {cfg['probe']} exceeds the training set ({len(train_ds)} images)")
        probe = torch.stack([train_ds[int(i)][0] for i in pick])[dctx.rank :: dctx.world].to(device)
        if probe.shape[0] % 2:
            raise ValueError(f"--probe {cfg['probe']} must split into an even number of images per process")
    monitor = Monitor(model, cfg["monitor_every"], probe=probe, dist=dctx, amp=amp)

    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        state = ckpt["state"]
        start = ckpt["step"]
    else:
        acc0, loss0 = evaluate(model, val_ds, device, limit=cfg["eval_limit"], dctx=dctx, amp=amp)
        state = {"initial_acc": acc0, "best_acc": acc0, "last_acc": acc0, "plasticity_start": None}
        rd.log({"kind": "eval", "iter": -1, "step": 0, "acc": acc0, "loss": loss0})
        start = 0
    wrapped = model
    if dctx.enabled:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    tb = _tensorboard(run_path) if cfg["tensorboard"] and dctx.is_main else None
    if ckpt is not None:
        set_rng_state(ckpt["rng"])

    steps = cfg["steps"]
    bar = _progress(cfg, dctx, steps, start, f"{train} lr={lr:g} seed={seed}")
    log_every = max(1, steps // 50)
    stop_after = cfg.get("_stop_after")
    try:
        for it, x, y in feed.iterate(start, steps, cfg["workers"]):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with monitor.training_forward(it), amp():
                logits = wrapped(x)
            loss = torch.nn.functional.cross_entropy(logits.float(), y)
            loss.backward()
            lr_now = sched.get_last_lr()[0]
            if monitor.due(it):
                rec = monitor.record(it, loss, lr_now)
                if state["plasticity_start"] is None:
                    state["plasticity_start"] = rec["plasticity_mean"]
                rd.log(rec)
                _tb_write(tb, rec, it)
                bar.set_postfix(loss=f"{rec['loss']:.3f}", acc=f"{state['last_acc']:.3f}", refresh=False)
            elif not cfg["monitor_every"] and it % log_every == 0:
                loss_avg = float(dctx.sum_(loss.detach().float().reshape(1).clone()).item()) / dctx.world
                rd.log({"kind": "train", "iter": it, "step": it, "loss": loss_avg, "lr": lr_now})
            if cfg["grad_clip"] is not None:
                torch.nn.utils.clip_grad_norm_(params, cfg["grad_clip"])
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            done = it + 1
            if (cfg["eval_every"] and done % cfg["eval_every"] == 0) or done == steps:
                acc, vloss = evaluate(model, val_ds, device, limit=cfg["eval_limit"], dctx=dctx, amp=amp)
                state["last_acc"], state["best_acc"] = acc, max(state["best_acc"], acc)
                rec = {"kind": "eval", "iter": it, "step": done, "acc": acc, "loss": vloss}
                rd.log(rec)
                _tb_write(tb, rec, done)
                bar.set_postfix(acc=f"{acc:.3f}", refresh=False)
            bar.update(1)
            if (cfg["checkpoint_every"] and done % cfg["checkpoint_every"] == 0) or done == steps:
                rd.save_checkpoint({
                    "step": done, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "rng": rng_state(), "state": state,
                    **({"auto": auto} if chosen is not None else {}),
                })
            if stop_after is not None and done >= stop_after:
                raise SimulatedKill(f"stopped after iteration {done}")
    finally:
        bar.close()
        rd.close()
        if tb is not None:
            tb.close()

    summary = {
        "train": train, "lr": lr, "seed": seed, "trained": list(parts),
        "final_acc": state["last_acc"], "best_acc": state["best_acc"],
        "initial_acc": state["initial_acc"], "plasticity_start": state["plasticity_start"],
        "trainable_params": n_train, "total_params": count_parameters(model),
        "steps": steps, "world_size": dctx.world, "seconds": time.perf_counter() - t0 if start == 0 else None,
        "run_dir": str(run_path), "model": cfg["model"], "data": cfg["data"],
    }
    if chosen is not None:
        summary["auto"] = auto
    if dctx.is_main and cfg["plots"]:
        from .finetune_plots import plot_curves

        plot_curves(rd.metrics(), run_path / "plots" / "curves.png", title=f"{train} lr={lr:g} seed={seed}")
    rd.write_summary(summary)
    dctx.barrier()
    return summary


def _progress(cfg, dctx, total, initial, desc):
    from tqdm.auto import tqdm

    enabled = cfg["progress"] if cfg["progress"] is not None else sys.stderr.isatty()
    return tqdm(total=total, initial=initial, desc=desc, disable=not (enabled and dctx.is_main),
                dynamic_ncols=True, leave=False)


def _tensorboard_writer_class():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError("--tensorboard needs the tensorboard package: pip install tensorboard") from exc
    return SummaryWriter


def _tensorboard(run_path: Path):
    return _tensorboard_writer_class()(str(run_path / "tb"))


def _tb_write(tb, rec: dict, step: int) -> None:
    if tb is None:
        return
    kind = rec["kind"]
    for key in ("loss", "lr", "acc"):
        if key in rec:
            tb.add_scalar(f"{kind}/{key}", rec[key], step)
    for group, value in rec.get("plasticity_mean", {}).items():
        tb.add_scalar(f"plasticity/{group}", value, step)
    for group, value in rec.get("grad_norm", {}).items():
        tb.add_scalar(f"grad_norm/{group}", value, step)


# ------------------------------------------------------------------------------------------ grid
def aggregate(summaries: list[dict]) -> list[dict]:
    """Rows per (train, lr): accuracy mean +- std over seeds, plasticity of the trained component at
    the start, accuracy gain over linear probing (``head`` rows of the same lr) when present, else
    over the accuracy before finetuning."""
    groups: dict[tuple, list[dict]] = {}
    for s in summaries:
        groups.setdefault((s["train"], s["lr"]), []).append(s)
    start_plast: dict[str, list[float]] = {}
    for s in summaries:
        for c, v in (s.get("plasticity_start") or {}).items():
            start_plast.setdefault(c, []).append(v)
    rows = []
    for (train, lr), runs in groups.items():
        accs = [r["final_acc"] for r in runs]
        row = {
            "train": train, "lr": lr, "seeds": [r["seed"] for r in runs], "n": len(runs),
            "acc_mean": statistics.fmean(accs), "acc_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "initial_acc": statistics.fmean(r["initial_acc"] for r in runs),
            "trainable_params": runs[0]["trainable_params"],
        }
        comps = [p for p in parse_train(train) if p in COMPONENTS]
        if len(comps) == 1 and comps[0] in start_plast:
            row["plasticity"] = statistics.fmean(start_plast[comps[0]])
        rows.append(row)
    for row in rows:
        head = [r for r in rows if r["train"] == "head" and r["lr"] == row["lr"]]
        base = head[0]["acc_mean"] if head else row["initial_acc"]
        row["gain"] = row["acc_mean"] - base
        row["gain_over"] = "head" if head else "initial"
    return rows


def format_table(rows: list[dict]) -> str:
    """The per-component table (the paper's): accuracy mean +- std, gain, plasticity, parameters."""
    head = (f"{'train':<16} {'lr':>8} {'seeds':>5} {'accuracy':>17} {'gain':>8} {'plasticity':>10} "
            f"{'params':>10}")
    lines = [head, "-" * len(head)]
    for r in rows:
        plast = f"{r['plasticity']:.3f}" if "plasticity" in r else "-"
        lines.append(
            f"{r['train']:<16} {r['lr']:>8.2g} {r['n']:>5} {r['acc_mean']:>9.4f} ± {r['acc_std']:<6.4f}"
            f" {r['gain']:>+8.4f} {plast:>10} {r['trainable_params']:>10,}"
        )
    if rows:
        over = rows[0]["gain_over"]
        base = "linear probing (head)" if over == "head" else "the accuracy before finetuning"
        lines.append(f"(gain over {base})")
    return "\n".join(lines)


def finetune(**options) -> dict:
    """Run the finetuning grid described by ``options`` (the CLI's options, underscores for dashes:
    ``train="MHA,FC1"``, ``lr="1e-3,1e-4"``, ``seed="0,1"``, ``steps=200``, ``out="runs/x"``, ...).

    Returns ``{"runs": [summary per combination], "table": aggregate rows, "table_text": str}``.
    One combination trains into ``out``; several train into ``out/<train>-lr<lr>-s<seed>/`` and
    write ``out/grid_summary.json`` and the grid plots.
    """
    cfg = resolve_options(options)
    combos = [(t, lr, s) for t in cfg["train"] for lr in cfg["lr"] for s in cfg["seed"]]
    out = Path(cfg["out"])
    say = options.get("_say", print)
    dctx = init_distributed(cfg["device"] if cfg["device"] != "auto" else
                            ("cuda" if torch.cuda.is_available() else "cpu"))
    if not dctx.is_main:
        say = _silent
    try:
        if len(combos) > 1 and (out / "grid_summary.json").exists() and not cfg["resume"]:
            raise RunDirError(f"--out {out} already holds a finished grid (grid_summary.json); refusing to "
                              "overwrite it: choose another --out (or pass --resume to load its results)")
        summaries = []
        for train, lr, seed in combos:
            path = out if len(combos) == 1 else out / f"{train.replace('+', '_')}-lr{lr:g}-s{seed}"
            s = run_one(cfg, train, lr, seed, path, dctx, say=say)
            summaries.append(s)
            say(f"{train:<10} lr={lr:g} seed={seed}: accuracy {s['initial_acc']:.4f} -> {s['final_acc']:.4f}"
                f" ({s['trainable_params']:,} trainable parameters)")
        rows = aggregate(summaries)
        text = format_table(rows)
        result = {"runs": summaries, "table": rows, "table_text": text}
        if dctx.is_main and len(combos) > 1:
            public = {k: v for k, v in cfg.items() if not k.startswith("_")}
            write_json_atomic(out / "grid_summary.json", {"config": public, **result})
            if cfg["plots"]:
                from .finetune_plots import plot_grid

                plot_grid(rows, out / "plots")
        say(text)
        return result
    finally:
        dctx.close()


def _silent(*args, **kwargs) -> None:
    pass


# ------------------------------------------------------------------------------------------ CLI
def _model_arg(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--model-arg expects KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    g = p.add_argument_group("model and data")
    g.add_argument("--model", default=d["model"],
                   help=f"timm model name, or {DEFAULT_MODEL!r} (the embedded ViT pretrained on digits 0-4)")
    g.add_argument("--model-arg", action="append", type=_model_arg, default=[], metavar="KEY=VALUE",
                   help="extra timm.create_model argument (repeatable), e.g. patch_size=4")
    g.add_argument("--weights", help="local pretrained checkpoint (.safetensors, .pth, .npz)")
    g.add_argument("--data", default=d["data"],
                   help="digits[:CLASSES], synthetic, cifar10:DIR, cifar100:DIR or an ImageFolder DIR")
    g.add_argument("--img-size", type=int, help="input size (default: the model's)")
    g = p.add_argument_group("what to train (comma-separated values form a grid)")
    g.add_argument("--train", default=d["train"],
                   help=f"one or more of {', '.join(TRAIN_CHOICES)}; join components with + "
                   "(default: %(default)s)")
    g.add_argument("--budget", type=int, help="trainable-parameter budget of --train auto")
    g.add_argument("--auto-batches", type=int, default=d["auto_batches"],
                   help="batches measured by --train auto (default: %(default)s)")
    g.add_argument("--lora-r", type=int, default=d["lora_r"], help="LoRA rank of --train lora")
    g = p.add_argument_group("optimisation")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default=d["optimizer"], help="sgd has momentum 0.9")
    g.add_argument("--lr", default=d["lr"], help="learning rate(s), comma-separated (default: %(default)s)")
    g.add_argument("--weight-decay", type=float, default=d["weight_decay"])
    g.add_argument("--schedule", choices=SCHEDULES, default=d["schedule"])
    g.add_argument("--warmup", type=int, default=d["warmup"], help="linear warm-up iterations")
    g.add_argument("--grad-clip", type=float, help="clip the global gradient norm to this value")
    g.add_argument("--steps", type=int, default=d["steps"], help="optimiser steps (default: %(default)s)")
    g.add_argument("--batch-size", type=int, default=d["batch_size"], help="global batch size")
    g.add_argument("--seed", default=d["seed"], help="seed(s), comma-separated (default: %(default)s)")
    g.add_argument("--amp", choices=AMP_CHOICES, default=d["amp"], help="autocast precision")
    g.add_argument("--device", default=d["device"], help="auto, cpu, cuda, cuda:N (default: %(default)s)")
    g.add_argument("--workers", type=int, default=d["workers"], help="data-loading processes")
    g = p.add_argument_group("monitoring and outputs")
    g.add_argument("--monitor-every", type=int, default=d["monitor_every"],
                   help="record plasticity and gradient norms every K steps (0 = off; default: %(default)s)")
    g.add_argument("--probe", type=int, default=d["probe"],
                   help="monitor on a fixed probe batch of N training images instead of the training batch")
    g.add_argument("--eval-every", type=int, default=d["eval_every"],
                   help="validation accuracy every K steps (0 = at the end only)")
    g.add_argument("--eval-limit", type=int, default=d["eval_limit"], help="validate on the first N images")
    g.add_argument("--checkpoint-every", type=int, default=d["checkpoint_every"])
    g.add_argument("--out", required=True, help="run directory (a grid writes one sub-directory per run)")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    g.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard logs (needs tensorboard)")
    g.add_argument("--no-plots", dest="plots", action="store_false")
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="force the progress bar (default: when stderr is a terminal)")
    g.add_argument("--no-progress", dest="progress", action="store_false")


def options_from_args(args: argparse.Namespace) -> dict:
    opts = {k: getattr(args, k) for k in DEFAULTS if k != "model_kwargs" and hasattr(args, k)}
    opts["model_kwargs"] = dict(getattr(args, "model_arg", []) or [])
    return opts


def run(args: argparse.Namespace) -> int:
    try:
        finetune(**options_from_args(args))
    except (ValueError, RunDirError, FileNotFoundError, ImportError) as exc:
        print(f"vitplast finetune: error: {exc}", file=sys.stderr)
        return 2
    return 0
