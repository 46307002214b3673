"""What a finetuning run records per step (`StepRecorder`), on the steps the schedule of
`vitplast_kernels.monitor` measures (every ``every``-th: ``it % every == 0``), for the model being trained:

- plasticity per component and layer (protocol ``in_situ``): on the **training batch** itself (pairs = its two
  halves, captured during the real forward pass, so nothing is recomputed), or on a **fixed probe batch**
  (``probe``: the same images and pairs every time, so curves are comparable; one extra forward pass without
  gradients);
- the gradient norm per component (``MHA``, ``FC1``, ``FC2``, ``LN1``, ``LN2``, ``head``, ``other``) over the
  parameters that have a gradient, before clipping;
- the loss and the learning rate.

The monitor's capture is attached once, when the recorder is made (before the model is compiled), and paused
and resumed by `StepMonitor` as the trainer callbacks' is: iterations between recorded ones run the plain
variant of a compiled model (the hooks read one flag and return), and nothing is synchronised. Under
DistributedDataParallel the result's sums are all-reduced over ranks (``PlasticityResult.all_reduce``) before
the means are taken, so the recorded plasticity is that of the global batch; every value is the result's own
(``mean``, ``overall``).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from vitplast_kernels import PlasticityResult

from ..integrations.step_monitor import StepMonitor
from ..runtime.distributed import DistContext
from .selection import parameter_groups


def summarize(result: PlasticityResult) -> dict:
    """A result as the record's fields: ``{"plasticity": {c: [mean per layer]}, "plasticity_mean": {c: mean
    over layers (the result's overall)}, "pairs": {c: [pairs used per layer]}, "excluded": {c: identical +
    non-finite pairs}}``."""
    cs = result.components
    return {"plasticity": {c: [float(v) for v in result.mean(c)] for c in cs},
            "plasticity_mean": {c: result.overall(c) for c in cs},
            "pairs": {c: [int(v) for v in result.n_pairs(c)] for c in cs},
            "excluded": {c: int(result.n_identical(c).sum() + result.n_nonfinite(c).sum()) for c in cs}}


def over_ranks(result: PlasticityResult, dist: DistContext | None) -> PlasticityResult:
    """The result over all ranks (its sums all-reduced) under torchrun, else itself."""
    return result.all_reduce() if dist is not None and dist.enabled else result


class StepRecorder:
    """Records, on the steps `vitplast_kernels.monitor`'s schedule measures (every ``every``-th), the
    plasticity per component and layer, the gradient norm per component, the loss and the lr.

    ``model`` is the unwrapped model (not the DDP wrapper). ``probe``: ``None`` (the training batch, its
    halves paired, captured in the real forward) or a fixed batch of images ``(2P, 3, H, W)`` already on the
    model's device (one extra forward without gradients). ``start``: the step a resumed run continues at. Per
    step: ``with recorder.training_forward(): ...``, then, when ``recorder.due``, ``recorder.record(...)``
    after backward, and ``recorder.step()`` at its end.
    """

    def __init__(self, model: nn.Module, every: int, *, probe: torch.Tensor | None = None,
                 dist: DistContext | None = None, amp=None, start: int = 0, components=None):
        if every < 0:
            raise ValueError(f"--monitor-every must be >= 0 (0 = off), got {every}")
        if probe is not None and (probe.shape[0] < 2 or probe.shape[0] % 2):
            raise ValueError(f"--probe must be an even number >= 2 of images, got {probe.shape[0]}")
        self.model, self.probe, self.dist, self.amp = model, probe, dist or DistContext(), amp
        names = parameter_groups(model, components)
        params = dict(model.named_parameters())
        self.groups = {g: [params[n] for n in ns] for g, ns in names.items()}
        self._steps: StepMonitor | None = None
        if every > 0:
            # the schedule and the capture: attached now, before the model is compiled; a resumed run's
            # schedule continues at ``start``; measuring is paused outside training_forward (evaluation,
            # the probe's own forward)
            self._steps = StepMonitor(every, protocol="in_situ", pairs="halves", components=components)
            self._steps.start(model, step=start)

    def close(self) -> None:
        """Removes the hooks."""
        if self._steps is not None:
            self._steps.stop()

    @property
    def due(self) -> bool:
        """Whether the current step is recorded."""
        return self._steps is not None and self._steps.due

    def step(self) -> None:
        """Ends the current training step (the monitor's schedule moves on)."""
        if self._steps is not None:
            self._steps.advance()

    @contextlib.contextmanager
    def training_forward(self):
        """Wraps the training forward pass: captured when the step is due and the pairs are the training
        batch's halves; otherwise nothing at all."""
        if self._steps is None or self.probe is not None:
            yield
            return
        with self._steps.monitor.measuring(self.due):
            yield

    def grad_norms(self) -> dict[str, torch.Tensor]:
        """``{group: norm}`` (0-dim tensors, on device) of the current gradients; groups without gradients are
        left out."""
        out = {}
        for g, params in self.groups.items():
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                norms = torch._foreach_norm(grads)
                out[g] = torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))
        return out

    def record(self, it: int, loss: torch.Tensor, lr: float) -> dict:
        """The record of the due iteration ``it`` (call after backward, before the optimiser step)."""
        if not self.due:
            raise RuntimeError(f"StepRecorder.record: iteration {it} is not a recorded step")
        if self.probe is not None:  # the probe's own forward, without gradients
            was_training = self.model.training
            self.model.eval()
            with torch.no_grad(), self._steps.monitor.measuring(True):
                with self.amp() if self.amp is not None else contextlib.nullcontext():
                    self.model(self.probe)
            self.model.train(was_training)
        summary = summarize(over_ranks(self._steps.monitor.result(reset=True), self.dist))
        loss_t = self.dist.sum_(loss.detach().float().reshape(1).clone()) / self.dist.world
        gn = self.grad_norms()
        gn_values = torch.stack(list(gn.values())).tolist() if gn else []
        return {"kind": "monitor", "iter": it, "step": it, "loss": float(loss_t.item()), "lr": float(lr),
                "grad_norm": dict(zip(gn.keys(), gn_values, strict=True)),
                "source": "probe" if self.probe is not None else "halves", **summary}

