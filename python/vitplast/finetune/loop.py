"""One finetuning run: (train, lr, seed) trained into its run directory, resumable from its checkpoint.

The run directory (``common.rundir.RunDir``) holds config.json, metrics.jsonl (monitor, eval and train
records: the training loss of every step), checkpoint.pt (atomic) and summary.json (the finished
marker); with ``--export``, model.safetensors (and adapter/ for LoRA). Everything a resumed run needs
to continue exactly is in the checkpoint: model, optimiser, scheduler, RNG states, running accuracies
and, for ``--train auto``, the components it chose; the data order is a function of the iteration.
The directory is locked while the run writes it (a second writer is refused).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ..runtime.distributed import DistContext
from ..runs.rundir import RunDir, RunDirError, rng_state, set_rng_state
from .data import StepBatches, evaluate, load_data, probe_batch
from .export import export_weights
from .log import RunLog, progress_bar
from .model import (
    amp_factory,
    build_model,
    input_size,
    lr_schedule,
    make_optimizer,
    make_trainable,
    run_device,
    trainable_parts,
)


class SimulatedKill(BaseException):
    """Raised by the ``_stop_after`` test hook: the run stops as if killed (nothing more written)."""


def _open_run_dir(cfg: dict, run_cfg: dict, run_path: Path, dctx: DistContext) -> RunDir:
    """Rank 0 opens (and validates) the directory; the others read what it validated."""
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
    return rd


def run_one(cfg: dict, train: str, lr: float, seed: int, run_path: Path, dctx: DistContext,
            say=print) -> dict:
    """Train one (train, lr, seed) combination into ``run_path``; returns its summary dict."""
    run_cfg = {k: v for k, v in cfg.items() if k not in ("train", "lr", "seed") and not k.startswith("_")}
    run_cfg.update(train=train, lr=lr, seed=seed)
    rd = _open_run_dir(cfg, run_cfg, run_path, dctx)
    try:
        stale = rd.lock.stale
        if stale and stale.get("alive") is not True:
            say(f"{run_path}: taking over the lock of process {stale.get('pid')} on {stale.get('host')} "
                "(no longer running)")
        if rd.finished:
            say(f"{run_path}: already finished, loading its summary")
            if cfg["export"] and dctx.is_main and rd.checkpoint is not None:
                export_weights(run_path, rd.checkpoint["model"], metadata=_export_meta(cfg, train, lr, seed))
            return rd.summary()
        return _train(cfg, train, lr, seed, run_path, dctx, rd, say)
    finally:
        rd.close()


def _export_meta(cfg: dict, train: str, lr: float, seed: int) -> dict[str, str]:
    return {"model": str(cfg["model"]), "model_kwargs": json.dumps(cfg["model_kwargs"], sort_keys=True),
            "train": train, "lr": repr(lr), "seed": str(seed), "steps": str(cfg["steps"])}


def _train(cfg: dict, train: str, lr: float, seed: int, run_path: Path, dctx: DistContext, rd: RunDir,
           say) -> dict:
    from .step_recorder import StepRecorder
    from .trainable import count_parameters

    t0 = time.perf_counter()
    device = run_device(cfg, dctx)
    amp = amp_factory(cfg, device)
    torch.manual_seed(seed)
    probe_ds, _ = load_data(cfg, seed, cfg["img_size"] or 32)
    model = build_model(cfg, probe_ds.num_classes)
    img_size = input_size(model, cfg)
    train_ds, val_ds = load_data(cfg, seed, img_size)
    model.to(device).train()
    feed = StepBatches(train_ds, cfg["batch_size"], seed, dctx.rank, dctx.world)
    if cfg["monitor_every"] and not cfg["probe"] and (cfg["batch_size"] // dctx.world) % 2:
        local = cfg["batch_size"] // dctx.world
        raise ValueError(f"--batch-size {cfg['batch_size']} gives {local} images per process: must be even "
                         "to monitor on the training batch halves (or pass --probe N)")
    ckpt = rd.checkpoint
    log = RunLog(rd, dctx)
    parts, auto = trainable_parts(cfg, train, model, feed, device, dctx, amp, ckpt, log, say=say)
    model, names = make_trainable(model, parts, cfg["lora_r"], cfg.get("components"), cfg.get("lora_targets"))
    n_train = count_parameters(model, names)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(cfg, params, lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(cfg))
    probe = probe_batch(train_ds, cfg["probe"], dctx, device) if cfg["probe"] else None
    recorder = StepRecorder(model, cfg["monitor_every"], probe=probe, dist=dctx, amp=amp,
                            start=ckpt["step"] if ckpt is not None else 0, components=cfg.get("components"))

    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        state = ckpt["state"]
        start = ckpt["step"]
    else:
        acc0, loss0 = evaluate(model, val_ds, device, limit=cfg["eval_limit"], dctx=dctx, amp=amp)
        state = {"initial_acc": acc0, "best_acc": acc0, "last_acc": acc0, "plasticity_start": None}
        log.log({"kind": "eval", "iter": -1, "step": 0, "acc": acc0, "loss": loss0})
        start = 0
    wrapped = model
    if dctx.enabled:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg["compile"]:  # after the recorder attached its hooks: they are compiled into the step's graph
        wrapped = torch.compile(wrapped, mode=None if cfg["compile"] == "default" else cfg["compile"])
    if cfg["tensorboard"]:
        log.open_tensorboard(run_path)  # every row kept in metrics.jsonl, then the new ones
    if ckpt is not None:
        set_rng_state(ckpt["rng"])

    steps = cfg["steps"]
    bar = progress_bar(cfg, dctx, steps, start, f"{train} lr={lr:g} seed={seed}")
    stop_after = cfg.get("_stop_after")
    try:
        for it, x, y in feed.iterate(start, steps, cfg["workers"]):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with recorder.training_forward(), amp():
                logits = wrapped(x)
            loss = torch.nn.functional.cross_entropy(logits.float(), y)
            loss.backward()
            lr_now = sched.get_last_lr()[0]
            if recorder.due:
                rec = recorder.record(it, loss, lr_now)
                if state["plasticity_start"] is None:
                    state["plasticity_start"] = rec["plasticity_mean"]
                log.log(rec)
                bar.set_postfix(loss=f"{rec['loss']:.3f}", acc=f"{state['last_acc']:.3f}", refresh=False)
            log.train(it, loss, lr_now)  # every step's loss (written in groups, no sync per step)
            if cfg["grad_clip"] is not None:
                torch.nn.utils.clip_grad_norm_(params, cfg["grad_clip"])
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            recorder.step()
            done = it + 1
            if (cfg["eval_every"] and done % cfg["eval_every"] == 0) or done == steps:
                acc, vloss = evaluate(model, val_ds, device, limit=cfg["eval_limit"], dctx=dctx, amp=amp)
                state["last_acc"], state["best_acc"] = acc, max(state["best_acc"], acc)
                log.log({"kind": "eval", "iter": it, "step": done, "acc": acc, "loss": vloss})
                bar.set_postfix(acc=f"{acc:.3f}", refresh=False)
            bar.update(1)
            if (cfg["checkpoint_every"] and done % cfg["checkpoint_every"] == 0) or done == steps:
                log.flush()  # every row of the iterations before the checkpoint is on disk with it
                rd.save_checkpoint({
                    "step": done, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "rng": rng_state(), "state": state,
                    **({"auto": auto} if auto is not None else {}),
                })
            if stop_after is not None and done >= stop_after:
                raise SimulatedKill(f"stopped after iteration {done}")
        log.flush()
    finally:
        recorder.close()
        bar.close()
        log.close()

    summary = {
        "train": train, "lr": lr, "seed": seed, "trained": list(parts),
        "final_acc": state["last_acc"], "best_acc": state["best_acc"],
        "initial_acc": state["initial_acc"], "plasticity_start": state["plasticity_start"],
        "trainable_params": n_train, "total_params": count_parameters(model),
        "steps": steps, "world_size": dctx.world, "seconds": time.perf_counter() - t0 if start == 0 else None,
        "run_dir": str(run_path), "model": cfg["model"], "data": cfg["data"],
    }
    if auto is not None:
        summary["auto"] = auto
    if dctx.is_main and cfg["plots"]:
        from .plots import plot_curves

        plot_curves(rd.metrics(), run_path / "plots" / "curves.png", title=f"{train} lr={lr:g} seed={seed}")
    if cfg["export"] and dctx.is_main:
        export_weights(run_path, model.state_dict(), peft_model=model if parts == ("lora",) else None,
                       metadata=_export_meta(cfg, train, lr, seed))
    rd.write_summary(summary)
    dctx.barrier()
    return summary
