"""``PlasticityCallback``: plasticity monitoring in a Lightning ``Trainer``.

Usage:
    from vitplast.integrations import PlasticityCallback

    trainer = lightning.Trainer(callbacks=[PlasticityCallback(every=50)], ...)
    trainer.fit(module)            # module: a LightningModule holding e.g. a timm ViT

Lightning numbers its optimizer steps 0, 1, 2, ... (``trainer.global_step`` while a step runs; what
``self.log`` in ``training_step`` is logged at). The training forwards of the steps numbered 0,
``every``, ``2 * every``, ... (all micro-batches under gradient accumulation) are measured: pairs are
the two halves of each training batch by default (``pairs="halves"``: image ``i`` with ``i + B``). The
metrics ``plasticity/{component}`` (mean over layers) and ``plasticity/{component}/layer_{l}`` go to
every logger of the trainer at the number of the step they were measured in (``logger.log_metrics``,
whatever ``log_every_n_steps``) and into ``trainer.callback_metrics`` (usable by
``ModelCheckpoint``/``EarlyStopping``); the callback's settings (``every``, ``protocol``, ``pairs``,
...) join the loggers' hyperparameters under ``plasticity`` (``hparams.yaml``, TensorBoard's HPARAMS).
Under DDP the per-pair sums are all-reduced before the means are taken, so every logged value covers
the global batch. At the end of training, rank 0 writes ``plasticity.json`` (every measured step
merged; the model named after the module holding the measured components, e.g. the timm ViT inside
the LightningModule) into ``dirpath`` or ``trainer.log_dir``.

The hooks are attached in ``on_fit_start``: after Lightning has moved the model to its device and wrapped it
(the capture's sums live on the model's device), before the first forward, so a ``torch.compile``d module
traces them. Validation, sanity checks and anything else outside a training batch are not measured.
"""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer

from .step_monitor import StepMonitor, monitored_module


class PlasticityCallback(Callback):
    """Measures plasticity on the optimizer steps of ``Trainer.fit`` numbered 0, ``every``, ``2 * every``, ...

    Args:
        every: measure the steps whose number is a multiple of ``every``.
        module: attribute path of the submodule to measure (``"model"`` for ``pl_module.model``);
            default the LightningModule itself (its components are found by the presets or
            ``components``).
        dirpath: where ``plasticity.json`` is written (default ``trainer.log_dir``).
        prefix: metric name prefix; ``per_layer``: also log per-layer values.
        plot: also write ``plasticity.png`` and ``plasticity_heatmap.png``.
        capture_kwargs: `vitplast_kernels.capture`'s options (``protocol``, ``pairs``,
            ``components``, ``embedding``, ``tokens``, ...).
    """

    def __init__(self, every: int = 10, *, module: str | None = None,
                 dirpath: str | os.PathLike | None = None, prefix: str = "plasticity",
                 per_layer: bool = True, plot: bool = False, **capture_kwargs: Any) -> None:
        super().__init__()
        self.steps = StepMonitor(every, prefix=prefix, per_layer=per_layer, **capture_kwargs)
        self.module, self.dirpath, self.plot = module, dirpath, plot
        self.files: list = []  # what the last fit wrote (rank 0)
        self._global_step = 0

    @property
    def result(self):
        """Every measured step of the last fit merged (ranks combined), or None."""
        return self.steps.total

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.files = []
        self.steps.start(monitored_module(pl_module, self.module, "PlasticityCallback"),
                         wrapper=self.module is None)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_hyperparams({self.steps.prefix: self.steps.settings()})

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._global_step = trainer.global_step  # restored from a checkpoint by now
        self.steps.set_step(trainer.global_step)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.steps.resume()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if trainer.global_step != self._global_step:  # this batch ended the optimizer step _global_step
            step, self._global_step = self._global_step, trainer.global_step
            if metrics := self.steps.end_step():
                pl_module.log_dict(metrics, on_step=True, on_epoch=False, logger=False)
                if trainer.is_global_zero:
                    for logger in trainer.loggers:
                        logger.log_metrics(metrics, step=step)
        self.steps.pause()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        directory = self.dirpath if self.dirpath is not None else trainer.log_dir  # collective under DDP
        if trainer.is_global_zero and directory is not None:
            self.files = self.steps.write(directory, plot=self.plot)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.steps.stop()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.steps.stop()
