"""``PlasticityTrainerCallback``: plasticity monitoring in a Hugging Face ``transformers.Trainer``.

Usage::

    from vitplast.integrations import PlasticityTrainerCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds)
    trainer.add_callback(PlasticityTrainerCallback(every=50, trainer=trainer))
    trainer.train()

Every ``every``-th optimizer step the training forwards of that step are measured (pairs: the two
halves of each training batch by default). The metrics ``plasticity/{component}`` (mean over layers)
and ``plasticity/{component}/layer_{l}`` are logged at the step they were measured:

- with ``trainer=`` given, through ``trainer.log`` — into ``trainer.state.log_history`` and to every
  ``report_to`` integration (TensorBoard, W&B, ...) and callback, like the trainer's own loss;
- without it (a callback passed to ``Trainer(callbacks=[...])`` cannot know its trainer): at a step the
  trainer logs anyway, the metrics join its ``logs`` in ``on_log`` (they reach ``state.log_history``
  and the callbacks after this one, not the ``report_to`` integrations, which the trainer calls first);
  at any other step they are a record of their own in ``state.log_history`` only.

Either way the trainer logs what it would log without the callback: its loss at every
``logging_steps``, averaged over the same steps (the callback never asks for a log event, and the
events of ``trainer.log`` do not cancel the trainer's own).

Under DDP the per-pair sums are all-reduced before the means are taken. At the end of training the main
process writes ``plasticity.json`` (every measured step merged, ranks combined) into ``args.output_dir``.
The hooks are attached in ``on_train_begin`` (the model is on its device; the first forward, and so any
``torch.compile`` tracing, comes later); evaluation forwards are not measured.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from .step_monitor import StepMonitor


class PlasticityTrainerCallback(TrainerCallback):
    """Measures plasticity every ``every`` optimizer steps of ``Trainer.train``.

    Args:
        every: measure every ``every``-th optimizer step (0, k, 2k, ...).
        trainer: the ``Trainer`` (optional; see the module docstring for what it changes).
        module: attribute path of the submodule to measure (default: the trainer's model).
        dirpath: where ``plasticity.json`` is written (default ``args.output_dir``).
        prefix: metric name prefix; ``per_layer``: also log per-layer values.
        plot: also write ``plasticity.png``.
        capture_kwargs: :func:`vitplast_kernels.capture`'s options (``protocol``, ``pairs``,
            ``components``, ``embedding``, ``tokens``, ...).
    """

    def __init__(self, every: int = 10, *, trainer: Any = None, module: str | None = None,
                 dirpath: str | os.PathLike | None = None, prefix: str = "plasticity",
                 per_layer: bool = True, plot: bool = False, **capture_kwargs: Any) -> None:
        self.steps = StepMonitor(every, prefix=prefix, per_layer=per_layer, **capture_kwargs)
        self.trainer = trainer
        self.module = module
        self.dirpath = dirpath
        self.plot = plot
        self.files: list = []  # what the last training run wrote (main process)
        self._pending: dict[str, float] = {}

    @property
    def result(self):
        """Every measured step of the last training run merged (ranks combined), or None."""
        return self.steps.total

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            raise ValueError("PlasticityTrainerCallback: the trainer passed no model to on_train_begin")
        target = model
        if self.module is not None:
            try:
                target = model.get_submodule(self.module)
            except AttributeError as exc:
                raise ValueError(f"PlasticityTrainerCallback(module={self.module!r}): "
                                 f"{type(model).__name__} has no such submodule") from exc
        self.files, self._pending = [], {}
        self.steps.start(target)

    def on_step_begin(self, args, state, control, **kwargs):
        self.steps.resume()

    def on_step_end(self, args, state, control, **kwargs):
        metrics = self.steps.end_step()
        self.steps.pause()
        if not metrics:
            return control
        if self.trainer is not None:
            # trainer.log() runs the on_log events, which clear control.should_log: the trainer would then
            # skip its own log of this step (its loss). Its decisions are put back as they were.
            decided = (control.should_log, control.should_evaluate, control.should_save,
                       control.should_training_stop)
            self.trainer.log(dict(metrics))
            (control.should_log, control.should_evaluate, control.should_save,
             control.should_training_stop) = decided
        elif control.should_log:  # the trainer logs this step: the metrics join its record (on_log)
            self._pending.update(metrics)
        else:  # it does not: a record of their own, never a log event the trainer did not ask for
            state.log_history.append({**metrics, "epoch": state.epoch, "step": state.global_step})
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending and logs is not None:
            logs.update(self._pending)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(self._pending)
            self._pending = {}

    def on_train_end(self, args, state, control, **kwargs):
        self.steps.stop()
        directory = self.dirpath if self.dirpath is not None else args.output_dir
        if state.is_world_process_zero and directory:
            self.files = self.steps.write(directory, plot=self.plot)
