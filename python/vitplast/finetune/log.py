"""Where a finetuning run's rows go: metrics.jsonl and TensorBoard (`RunLog`).

Every row goes to both: the training loss of every step, the monitor (plasticity per component, mean over
layers and per layer; gradient norms), evaluation and ``auto`` rows. The per-step losses stay on the device
and are written in groups (one host sync and, under DDP, one all-reduce per group) at points that depend only
on the iteration: before any other row, before a checkpoint, every ``TRAIN_FLUSH_EVERY`` steps and at the end.
So rows of iterations before a checkpoint are on disk when it is saved, and a resumed run writes the same rows
in the same order as an uninterrupted one. TensorBoard's files are rebuilt from metrics.jsonl when a run
(re)starts, so they hold exactly its rows, none twice, whatever was written before a kill.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

TRAIN_FLUSH_EVERY = 50


def tensorboard_writer_class():
    """``SummaryWriter``, or ImportError saying what to install (checked before a run starts)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError("--tensorboard needs the tensorboard package: pip install tensorboard") from exc
    return SummaryWriter


def tensorboard_write(tb, rec: dict, step: int) -> None:
    """The scalars of one metrics record: loss, lr, accuracy, plasticity per component (mean over layers,
    ``plasticity/{c}``, and per layer, ``plasticity/{c}/layer_{l}``) and gradient norm per group."""
    if tb is None:
        return
    kind, plasticity = rec["kind"], rec.get("plasticity", {})
    scalars = [(f"{kind}/{key}", rec[key]) for key in ("loss", "lr", "acc") if key in rec]
    scalars += [(f"plasticity/{group}", value) for group, value in rec.get("plasticity_mean", {}).items()]
    if kind == "monitor":  # NaN: a layer without pairs
        scalars += [(f"plasticity/{group}/layer_{layer}", value) for group, per_layer in plasticity.items()
                    for layer, value in enumerate(per_layer) if value == value]
    scalars += [(f"grad_norm/{group}", value) for group, value in rec.get("grad_norm", {}).items()]
    if kind == "auto":  # the plasticity --train auto measured before training, and what it chose
        scalars += [(f"auto/plasticity/{group}", value) for group, value in plasticity.items()]
    for tag, value in scalars:
        tb.add_scalar(tag, value, step)
    if kind == "auto":
        tb.add_text("auto/chosen", ", ".join(rec.get("chosen", [])) or "head only", step)


class RunLog:
    """The rows of one run (see the module docstring). ``log(rec)`` writes a row; ``train(it, loss, lr)``
    queues the step's training loss; ``flush()`` writes the queued ones; ``open_tensorboard`` starts
    TensorBoard from the rows already in metrics.jsonl. Every rank calls the same methods at the same
    iterations (the queued losses are averaged over ranks); only the writer writes."""

    def __init__(self, rd, dctx) -> None:
        self.rd, self.dctx, self.tb = rd, dctx, None
        self._queued: list[tuple[int, torch.Tensor, float]] = []

    def open_tensorboard(self, run_path: Path) -> None:
        if not self.rd.writer:
            return
        shutil.rmtree(run_path / "tb", ignore_errors=True)  # rebuilt from metrics.jsonl, the record
        self.tb = tensorboard_writer_class()(str(run_path / "tb"))  # a writer of run_path/tb
        for rec in self.rd.metrics():
            tensorboard_write(self.tb, rec, rec["step"])

    def log(self, rec: dict) -> None:
        self.flush()
        self.rd.log(rec)
        tensorboard_write(self.tb, rec, rec["step"])

    def train(self, it: int, loss: torch.Tensor, lr: float) -> None:
        self._queued.append((it, loss.detach().float().reshape(1), lr))
        if (it + 1) % TRAIN_FLUSH_EVERY == 0:
            self.flush()

    def flush(self) -> None:
        if not self._queued:
            return
        queued, self._queued = self._queued, []
        losses = self.dctx.sum_(torch.cat([q[1] for q in queued])) / self.dctx.world
        for (it, _, lr), loss in zip(queued, losses.tolist(), strict=True):
            rec = {"kind": "train", "iter": it, "step": it, "loss": loss, "lr": lr}
            self.rd.log(rec)
            tensorboard_write(self.tb, rec, it)

    def close(self) -> None:
        """Closes TensorBoard; queued losses are dropped (a run that ends well flushes first; one that fails
        replays those iterations when resumed)."""
        self._queued = []
        if self.tb is not None:
            self.tb.close()
            self.tb = None
