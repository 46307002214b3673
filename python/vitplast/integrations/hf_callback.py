"""``PlasticityTrainerCallback``: plasticity monitoring in a Hugging Face ``transformers.Trainer``.

Usage (either way of registering it works the same):

    from vitplast.integrations import PlasticityTrainerCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[PlasticityTrainerCallback()])
    trainer.train()                     # or: trainer.add_callback(PlasticityTrainerCallback(every=50))

**Which steps.** The trainer numbers its optimizer steps 1, 2, 3, ... (``state.global_step`` after the step),
and logs the loss at the steps that are multiples of ``logging_steps``. The callback measures the training
forwards (every micro-batch under gradient accumulation) of the steps whose number is a multiple of ``every``;
``every=None`` (the default) takes ``logging_steps``, so the plasticity of a step is measured exactly where
the loss is logged. Pairs are the two halves of each training batch by default.

**Where the values go.** ``plasticity/{component}`` (mean over layers) and, with ``per_layer=True``,
``plasticity/{component}/layer_{l}`` go through the trainer's own logging path, numbered like the loss: into
the trainer's log event of that step when it has one (so one event, one console line, one ``log_history`` row
with the loss), else through ``trainer.log`` at that step. Either way every ``report_to`` integration
(TensorBoard, W&B, MLflow, ...) and every callback receives them. To join the trainer's event before the
integrations read it, the callback moves itself in the trainer's callback list to just after
``DefaultFlowCallback`` (the callback that decides when the trainer logs); it finds its trainer on the call
stack at ``on_train_begin`` when it was not given ``trainer=``. The console prints whatever a log event holds:
the per-layer values are off by default so that the loss line gains one key per component only.

The trainer logs what it would log without the callback: its loss at every ``logging_steps``, averaged over
the same steps; the callback never asks for a log event of the trainer and never cancels one. Under DDP the
per-pair sums are all-reduced before the means are taken. At the end of training the main process writes
``plasticity.json`` (every measured step merged, ranks combined) into ``args.output_dir`` (or ``dirpath``).
The hooks are attached in ``on_train_begin`` (the model is on its device; the first forward, and so any
``torch.compile`` tracing, comes later); evaluation forwards are not measured.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from transformers import DefaultFlowCallback, Trainer, TrainerCallback

from .step_monitor import StepMonitor, monitored_module


def calling_trainer(callback: TrainerCallback) -> Trainer | None:
    """The ``Trainer`` whose callback handler holds ``callback``, found on the call stack (the trainer's
    methods dispatch every event), or None outside a ``Trainer``."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, Trainer) and any(c is callback for c in owner.callback_handler.callbacks):
            return owner
        frame = frame.f_back
    return None


def run_before_integrations(trainer: Trainer, callback: TrainerCallback) -> None:
    """Moves ``callback`` in the trainer's callback list to just after ``DefaultFlowCallback``: it sees
    each log event before the ``report_to`` integrations and the console printers (moving it earlier
    is safe while the list is being walked: no callback is skipped or called twice)."""
    callbacks = trainer.callback_handler.callbacks
    if not any(c is callback for c in callbacks):
        return
    callbacks[:] = [c for c in callbacks if c is not callback]
    flow = [i for i, c in enumerate(callbacks) if isinstance(c, DefaultFlowCallback)]
    callbacks.insert(flow[-1] + 1 if flow else 0, callback)


class PlasticityTrainerCallback(TrainerCallback):
    """Measures plasticity on the optimizer steps of ``Trainer.train`` numbered ``every``, ``2 * every``, ...

    Args:
        every: measure the steps whose number is a multiple of ``every`` (default: the trainer's
            ``logging_steps``, where the loss is logged).
        trainer: the ``Trainer`` (optional: found on the call stack when training begins).
        module: attribute path of the submodule to measure (default: the trainer's model).
        dirpath: where ``plasticity.json`` is written (default ``args.output_dir``).
        prefix: metric name prefix; ``per_layer``: also log per-layer values (5 per layer for a ViT,
            printed on the console line too).
        plot: also write ``plasticity.png`` and ``plasticity_heatmap.png``.
        capture_kwargs: `vitplast_kernels.capture`'s options (``protocol``, ``pairs``,
            ``components``, ``embedding``, ``tokens``, ...).
    """

    def __init__(self, every: int | None = None, *, trainer: Trainer | None = None, module: str | None = None,
                 dirpath: str | os.PathLike | None = None, prefix: str = "plasticity",
                 per_layer: bool = False, plot: bool = False, **capture_kwargs: Any) -> None:
        self.every = every
        self.steps = StepMonitor(1 if every is None else every, prefix=prefix, per_layer=per_layer,
                                 **capture_kwargs)
        self.trainer, self.module, self.dirpath, self.plot = trainer, module, dirpath, plot
        self.files: list = []  # what the last training run wrote (main process)
        self._pending: dict[str, float] = {}  # values of step _pending_step, joining its log event
        self._pending_step: int | None = None

    @property
    def result(self):
        """Every measured step of the last training run merged (ranks combined), or None."""
        return self.steps.total

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            raise ValueError("PlasticityTrainerCallback: the trainer passed no model to on_train_begin")
        target = monitored_module(model, self.module, "PlasticityTrainerCallback")
        self.trainer = self.trainer if self.trainer is not None else calling_trainer(self)
        if self.trainer is not None:
            run_before_integrations(self.trainer, self)
        self.steps.every = self.every if self.every is not None else max(1, int(state.logging_steps))
        self.files, self._pending, self._pending_step = [], {}, None
        self.steps.start(target, step=state.global_step + 1)  # the number the next step will have

    def on_step_begin(self, args, state, control, **kwargs):
        self._flush(state, control)
        self.steps.resume()

    def on_step_end(self, args, state, control, **kwargs):
        metrics = self.steps.end_step()
        self.steps.pause()
        if metrics:
            # the trainer logs right after this event when should_log is set: the values join its event
            self._pending, self._pending_step = dict(metrics), state.global_step
            if not control.should_log:
                self._flush(state, control)
        return control

    def _flush(self, state, control) -> None:
        """Logs values still pending (their step had no log event of the trainer) at their step."""
        if not self._pending:
            return
        metrics, self._pending = self._pending, {}
        if self.trainer is None:  # outside a Trainer: a record of their own in log_history
            state.log_history.append({**metrics, "epoch": state.epoch, "step": self._pending_step})
            return
        # trainer.log() runs the on_log events, which clear control.should_log; the trainer's decisions
        # for this step are put back as they were
        flags = ("should_log", "should_evaluate", "should_save", "should_training_stop")
        decided = {flag: getattr(control, flag) for flag in flags}
        self.trainer.log(metrics)
        vars(control).update(decided)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending and logs is not None and state.global_step == self._pending_step:
            logs.update(self._pending)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(self._pending)  # the trainer recorded the event before
            self._pending = {}

    def on_train_end(self, args, state, control, **kwargs):
        self._flush(state, control)
        self.steps.stop()
        directory = self.dirpath if self.dirpath is not None else args.output_dir
        if state.is_world_process_zero and directory:
            self.files = self.steps.write(directory, plot=self.plot)
