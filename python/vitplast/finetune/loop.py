"""One finetuning run (`RunSpec`) trained into its run directory, resumable from its checkpoint.

The run directory (`vitplast.runs.rundir.RunDir`) holds config.json, metrics.jsonl (monitor, eval and train
records: the training loss of every step; with ``--holdout``, a ``holdout`` record of the held-out images'
accuracy after the last step), checkpoint.pt (atomic) and summary.json (the finished marker, with
``holdout_acc`` (None without ``--holdout``) and the reproducibility record of
`vitplast.runs.provenance.provenance`); with ``--export``, model.safetensors (and adapter/ for LoRA).
Everything a resumed run needs to continue exactly is in the checkpoint: model, optimiser, RNG states, running
accuracies and, for ``--train auto``, the components it chose; the data order (and each image's augmentation)
is a function of the iteration, and the lr schedule one of the step. The directory is locked while the run
writes it (a second writer is refused).

A step is ``--grad-accum`` forward and backward passes over equal parts of its batch (the first one monitored
when the step is recorded), then gradient clipping (``--grad-clip``) and one optimiser step.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable

import torch

from ..outputs.reporter import Reporter
from ..runs.rundir import RunDir, RunDirError, rng_state, set_rng_state
from ..runtime.distributed import DistContext
from ..runtime.precision import autocast
from .auto import trained_parts
from .data import StepBatches, evaluate, load_data, probe_batch
from .export import export_weights
from .log import RunLog
from .model import current_lr, fresh_model, make_optimizer, make_scheduler, make_trainable, run_device
from .plots import plot_curves
from .preflight import Prepared
from .selection import count_parameters
from .spec import RunSpec
from .step_recorder import StepRecorder

AfterStep = Callable[[int], None]  # called with the number of finished steps, after each checkpoint point


def _open_run_dir(spec: RunSpec, dctx: DistContext) -> RunDir:
    """Rank 0 opens (and validates) the directory; the others read what it validated."""
    rd, config, err = RunDir(spec.directory, writer=dctx.is_main), None, None
    try:
        config = spec.resume_config(_saved_config(rd))
        if dctx.is_main:
            rd.open(config, resume=spec.resume)
    except RunDirError as exc:
        err = str(exc)
    if err := dctx.broadcast_object(err):
        raise RunDirError(err)
    if not dctx.is_main:
        rd.open(config, resume=True)  # read-only: the checkpoint rank 0 validated
    return rd


def _saved_config(rd: RunDir) -> dict | None:
    """The config.json of a run directory that holds one, else None."""
    try:
        saved = rd.saved_config() if rd.config_path.is_file() else None
    except (OSError, ValueError):
        return None  # RunDir.open reports it
    return saved if isinstance(saved, dict) else None


def train_run(spec: RunSpec, prepared: Prepared, *, dctx: DistContext | None = None,
              reporter: Reporter | None = None, after_step: AfterStep | None = None) -> dict:
    """Train (or load, when finished) the run ``spec`` describes; returns its summary dict. ``prepared``: what
    `vitplast.finetune.preflight.prepare` found for ``spec.settings``; ``after_step``: called after every step
    (a test may raise there to stop as if killed)."""
    dctx = dctx or DistContext()
    reporter = reporter or Reporter()
    rd = _open_run_dir(spec, dctx)
    try:
        stale = rd.lock.stale
        if stale and stale.get("alive") is not True:
            reporter.say(f"{spec.directory}: taking over the lock of process {stale.get('pid')} on "
                         f"{stale.get('host')} (no longer running)")
        if rd.finished:
            reporter.say(f"{spec.directory}: already finished, loading its summary")
            if spec.settings.export and dctx.is_main and rd.checkpoint is not None:
                export_weights(spec.directory, rd.checkpoint["model"], metadata=_export_meta(spec))
            return rd.summary()
        return _train(spec, prepared, dctx, rd, reporter, after_step)
    finally:
        rd.close()


def _export_meta(spec: RunSpec) -> dict[str, str]:
    s = spec.settings
    return {"model": str(s.model), "model_kwargs": json.dumps(s.model_kwargs, sort_keys=True),
            "train": spec.train, "lr": repr(spec.lr), "seed": str(spec.seed), "steps": str(s.steps)}


def _check_micro_batches(s, dctx: DistContext) -> None:
    """Each process's share of a step's batch splits into ``--grad-accum`` equal micro-batches, the first of
    them even when the training batch's halves are monitored."""
    share = s.batch_size // dctx.world
    if share % s.grad_accum:
        raise ValueError(f"--grad-accum {s.grad_accum}: must divide the {share} images per process of "
                         f"--batch-size {s.batch_size}")
    if s.monitor_every and not s.probe and (share // s.grad_accum) % 2:
        raise ValueError(f"--batch-size {s.batch_size} gives {share // s.grad_accum} images per process and "
                         "micro-batch: must be even to monitor on the training batch halves (or pass --probe "
                         "N)")


def _wrap(model: torch.nn.Module, compile_mode: str | None, dctx: DistContext, device) -> torch.nn.Module:
    """DDP under torchrun, then torch.compile (after the recorder attached its hooks: they are compiled into
    the step's graph)."""
    wrapped = model
    if dctx.enabled:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if compile_mode:
        wrapped = torch.compile(wrapped, mode=None if compile_mode == "default" else compile_mode)
    return wrapped


class Training:
    """The state of a run being trained: what `__init__` builds and the step loop uses."""

    def __init__(self, spec: RunSpec, prepared: Prepared, dctx: DistContext, rd: RunDir, reporter: Reporter):
        """Model, data, trainable parts, optimiser and recorder of a run, restored from its checkpoint."""
        s = self.settings = spec.settings
        self.spec, self.dctx, self.rd = spec, dctx, rd
        device = self.device = run_device(s, dctx)
        self.amp = autocast(s.amp, device)
        torch.manual_seed(spec.seed)
        model = fresh_model(s, prepared.num_classes)
        # the training images, the validation images and those --holdout keeps out (None: none)
        train_ds, self.val_ds, self.holdout_ds = load_data(s, spec.seed, prepared.img_size,
                                                           prepared.transform)
        model.to(device).train()
        self.feed = StepBatches(train_ds, s.batch_size, spec.seed, dctx.rank, dctx.world)
        _check_micro_batches(s, dctx)
        ckpt, self.log = rd.checkpoint, RunLog(rd, dctx)
        self.parts, self.auto = trained_parts(s, spec.train, model, self.feed, device, dctx, self.amp, ckpt,
                                              self.log, reporter)
        self.model, _ = make_trainable(model, self.parts, spec.train.lora_rank or s.lora_r, s.components,
                                       s.lora_targets, prepared.component_map)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = make_optimizer(s, self.model, spec.lr)
        self.sched = make_scheduler(s, self.opt)  # a timm scheduler, stepped by step_update(step)
        probe = probe_batch(train_ds, s.probe, dctx, device) if s.probe else None
        self.start = ckpt["step"] if ckpt is not None else 0
        self.recorder = StepRecorder(self.model, s.monitor_every, probe=probe, dist=dctx, amp=self.amp,
                                     start=self.start, components=s.components)
        if ckpt is not None:
            self.model.load_state_dict(ckpt["model"])
            self.opt.load_state_dict(ckpt["optimizer"])
            # the schedule is a function of the step: nothing else to restore
            self.sched.step_update(self.start)
            self.state = ckpt["state"]
        else:
            acc0, loss0 = self.evaluate(self.val_ds)
            self.state = {"initial_acc": acc0, "best_acc": acc0, "last_acc": acc0, "plasticity_start": None}
            self.log.log({"kind": "eval", "iter": -1, "step": 0, "acc": acc0, "loss": loss0})
        self.wrapped = _wrap(self.model, s.compile, dctx, device)  # DDP and/or torch.compile around model
        if s.tensorboard:
            self.log.open_tensorboard(spec.directory)  # every row kept in metrics.jsonl, then the new ones
        if ckpt is not None:
            set_rng_state(ckpt["rng"])

    def evaluate(self, dataset) -> tuple[float, float]:
        """``(accuracy, mean loss)`` on the validation images or those ``--holdout`` keeps out."""
        return evaluate(self.model, dataset, self.device, limit=self.settings.eval_limit, dctx=self.dctx,
                        amp=self.amp)

    def forward_backward(self, x, y, n_micro: int) -> torch.Tensor:
        """The step's loss (mean over its batch), its gradients accumulated over ``n_micro`` equal parts of
        the batch; the first part's forward is the one the monitor captures when the step is recorded, and
        under DDP only the last backward synchronises the gradients."""
        total = torch.zeros((), device=x.device)
        no_sync = getattr(self.wrapped, "no_sync", None)
        for k, (xk, yk) in enumerate(zip(x.chunk(n_micro), y.chunk(n_micro), strict=True)):
            sync = no_sync() if no_sync is not None and k < n_micro - 1 else contextlib.nullcontext()
            watched = self.recorder.training_forward() if k == 0 else contextlib.nullcontext()
            with sync:
                with watched, self.amp():
                    logits = self.wrapped(xk)
                loss = torch.nn.functional.cross_entropy(logits.float(), yk) * (yk.shape[0] / y.shape[0])
                loss.backward()
            total = total + loss.detach()
        return total

    def step(self, it: int, x, y, bar) -> None:
        """One optimiser step: forward and backward (monitored when due), record, clip, update."""
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        loss = self.forward_backward(x, y, self.settings.grad_accum)
        lr_now = current_lr(self.opt)
        if self.recorder.due:
            rec = self.recorder.record(it, loss, lr_now)
            if self.state["plasticity_start"] is None:
                self.state["plasticity_start"] = rec["plasticity_mean"]
            self.log.log(rec)
            bar.set_postfix(loss=f"{rec['loss']:.3f}", acc=f"{self.state['last_acc']:.3f}", refresh=False)
        self.log.train(it, loss, lr_now)  # every step's loss (written in groups, no sync per step)
        if self.settings.grad_clip:  # None or 0: no clipping
            torch.nn.utils.clip_grad_norm_(self.params, self.settings.grad_clip)
        self.opt.step()
        self.sched.step_update(it + 1)
        self.opt.zero_grad(set_to_none=True)
        self.recorder.step()

    def after_step(self, it: int, bar) -> None:
        """Validation and checkpoint at their iterations (and after the last step)."""
        s, done, state = self.settings, it + 1, self.state
        if (s.eval_every and done % s.eval_every == 0) or done == s.steps:
            acc, vloss = self.evaluate(self.val_ds)
            state["last_acc"], state["best_acc"] = acc, max(state["best_acc"], acc)
            self.log.log({"kind": "eval", "iter": it, "step": done, "acc": acc, "loss": vloss})
            bar.set_postfix(acc=f"{acc:.3f}", refresh=False)
        if done == s.steps and self.holdout_ds is not None:  # before the last checkpoint, which then holds it
            acc, hloss = self.evaluate(self.holdout_ds)
            state["holdout_acc"] = acc
            self.log.log({"kind": "holdout", "iter": it, "step": done, "acc": acc, "loss": hloss})
        bar.update(1)
        if (s.checkpoint_every and done % s.checkpoint_every == 0) or done == s.steps:
            self.log.flush()  # every row of the iterations before the checkpoint is on disk with it
            self.rd.save_checkpoint({"step": done, "model": self.model.state_dict(),
                                     "optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                                     "rng": rng_state(), "state": state,
                                     **({"auto": self.auto} if self.auto is not None else {})})

    def finish(self, prepared: Prepared, seconds: float | None) -> dict:
        """The summary (written last: it marks the run finished), the curves and the exported weights."""
        spec, s, state, main = self.spec, self.settings, self.state, self.dctx.is_main
        summary = {"train": spec.train, "lr": spec.lr, "seed": spec.seed, "trained": list(self.parts),
                   "final_acc": state["last_acc"], "best_acc": state["best_acc"],
                   "initial_acc": state["initial_acc"], "holdout_acc": state.get("holdout_acc"),
                   "plasticity_start": state["plasticity_start"],
                   "trainable_params": sum(p.numel() for p in self.params),
                   "total_params": count_parameters(self.model), "steps": s.steps,
                   "world_size": self.dctx.world, "seconds": seconds, "run_dir": str(spec.directory),
                   "model": s.model, "data": s.data, "provenance": prepared.provenance,
                   **({"auto": self.auto} if self.auto is not None else {})}
        if main and s.plots:
            plot_curves(self.rd.metrics(), spec.directory / "plots" / "curves.png", title=spec.label)
        if s.export and main:
            peft_model = self.model if spec.train.is_lora else None
            export_weights(spec.directory, self.model.state_dict(), peft_model=peft_model,
                           metadata=_export_meta(spec))
        self.rd.write_summary(summary)
        self.dctx.barrier()
        return summary


def _train(spec: RunSpec, prepared: Prepared, dctx: DistContext, rd: RunDir, reporter: Reporter,
           after_step: AfterStep | None) -> dict:
    t0 = time.perf_counter()
    t = Training(spec, prepared, dctx, rd, reporter)
    s = spec.settings
    bar = reporter.bar(total=s.steps, initial=t.start, desc=spec.label,
                       wanted=s.progress if dctx.is_main else False)
    try:
        for it, x, y in t.feed.iterate(t.start, s.steps, s.workers):
            t.step(it, x, y, bar)
            t.after_step(it, bar)
            if after_step is not None:
                after_step(it + 1)
        t.log.flush()
    finally:
        t.recorder.close()
        bar.close()
        t.log.close()
    return t.finish(prepared, time.perf_counter() - t0 if t.start == 0 else None)
