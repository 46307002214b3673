"""Per-step plasticity monitoring inside a training loop.

Every ``every`` iterations (``it % every == 0``) the monitor records, for the model being trained:

- plasticity per component and layer, through :func:`vitplast_kernels.capture` (protocol ``in_situ``):
  on the **training batch** itself (pairs = its two halves, captured during the real forward pass, so
  nothing is recomputed), or on a **fixed probe batch** (``probe``: the same sequences and pairs every
  time, so curves are comparable; one extra forward pass without gradients);
- the gradient norm per component (``MHA``, ``FC1``, ``FC2``, ``LN1``, ``LN2``, ``head``, ``other``)
  over the parameters that have a gradient, before clipping;
- the loss and the learning rate.

The capture is attached once, when the monitor is made (before the model is compiled): iterations
between monitored ones run the plain variant of a compiled model (the hooks read one flag and return),
and nothing is synchronised.
Under DistributedDataParallel the per-(component, layer) pair statistics are summed over ranks before
the means are taken, so the recorded plasticity is that of the global batch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from ..common.distributed import DistContext
from .trainable import COMPONENTS, component_parameter_names


def _stats_of(result) -> tuple[list[str], torch.Tensor]:
    """``(components, stats (C, L, 5) float64 [count, sum, sumsq, identical, nonfinite])`` of a result."""
    comps = list(result.components)
    stats = result.stats
    if not isinstance(stats, torch.Tensor):
        stats = torch.stack([torch.as_tensor(stats[c]) for c in comps])
    return comps, stats.detach().to(torch.float64)


def summarize_stats(components: Sequence[str], stats: torch.Tensor) -> dict:
    """``stats (C, L, 5)`` -> ``{"plasticity": {c: [mean per layer]}, "plasticity_mean": {c: mean over
    layers}, "pairs": {c: [pairs used per layer]}, "excluded": {c: identical + non-finite pairs}}``."""
    stats = stats.cpu()
    count, total = stats[..., 0], stats[..., 1]
    mean = torch.where(count > 0, total / count.clamp_min(1), torch.full_like(total, float("nan")))
    out = {"plasticity": {}, "plasticity_mean": {}, "pairs": {}, "excluded": {}}
    for i, c in enumerate(components):
        layers = mean[i]
        finite = layers[torch.isfinite(layers)]
        out["plasticity"][c] = [float(v) for v in layers]
        out["plasticity_mean"][c] = float(finite.mean()) if finite.numel() else float("nan")
        out["pairs"][c] = [int(v) for v in count[i]]
        out["excluded"][c] = int(stats[i, :, 3].sum() + stats[i, :, 4].sum())
    return out


def measure_plasticity(model: nn.Module, batches, *, dist: DistContext | None = None, amp=None) -> dict:
    """Plasticity (halves of each batch, in situ) summed over ``batches`` (an iterable of images
    ``(2B, 3, H, W)``) and over ranks; returns :func:`summarize_stats`'s dict."""
    from vitplast_kernels import capture, pairwise_plasticity

    total, comps = None, None
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for images in batches:
            with capture(model, protocol="in_situ", pairs="halves") as acts:
                with amp() if amp is not None else contextlib.nullcontext():
                    model(images)
            comps, stats = _stats_of(pairwise_plasticity(acts))
            total = stats if total is None else total + stats
    model.train(was_training)
    if total is None:
        raise ValueError("measure_plasticity: batches is empty")
    if dist is not None:
        total = dist.sum_(total.to(_reduce_device(model)).contiguous()).cpu()
    return summarize_stats(comps, total)


def _reduce_device(model: nn.Module) -> torch.device:
    p = next(model.parameters())
    return p.device


class Monitor:
    """Decides which iterations are monitored and builds their records.

    ``model`` is the unwrapped model (not the DDP wrapper). ``probe``: ``None`` (training batch,
    halves) or a fixed batch of images ``(2P, 3, H, W)`` already on the model's device.
    """

    def __init__(self, model: nn.Module, every: int, *, probe: torch.Tensor | None = None,
                 dist: DistContext | None = None, amp=None):
        if every < 0:
            raise ValueError(f"--monitor-every must be >= 0 (0 = off), got {every}")
        if probe is not None and (probe.shape[0] < 2 or probe.shape[0] % 2):
            raise ValueError(f"--probe must be an even number >= 2 of images, got {probe.shape[0]}")
        self.model = model
        self.every = every
        self.probe = probe
        self.dist = dist or DistContext()
        self.amp = amp
        names = component_parameter_names(model)
        params = dict(model.named_parameters())
        self.groups = {g: [params[n] for n in ns] for g, ns in names.items()}
        self._mon = None
        if probe is None and every > 0:
            from vitplast_kernels import monitor

            self._mon = monitor(model, protocol="in_situ", pairs="halves")
            self._mon.capture.enabled = False
        self._measured = False

    def close(self) -> None:
        """Removes the hooks."""
        if self._mon is not None:
            self._mon.detach()

    def due(self, it: int) -> bool:
        return self.every > 0 and it % self.every == 0

    @contextlib.contextmanager
    def training_forward(self, it: int):
        """Wrap the training forward pass of iteration ``it``: captures it when due and pairing on
        the training batch; otherwise does nothing at all."""
        if self._mon is None:
            yield
            return
        due = self.due(it)
        with self._mon.measuring(due):
            yield
        self._measured = self._measured or due

    def grad_norms(self) -> dict[str, torch.Tensor]:
        """``{group: norm}`` (0-dim tensors, on device) of the current gradients; groups without
        gradients are left out."""
        out = {}
        for g, params in self.groups.items():
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                norms = torch._foreach_norm(grads)
                out[g] = torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))
        return out

    def record(self, it: int, loss: torch.Tensor, lr: float, *, grad_norms: Mapping | None = None) -> dict:
        """The record of monitored iteration ``it`` (call after backward, before the optimiser step)."""
        if self.probe is not None:
            summary = measure_plasticity(self.model, [self.probe], dist=self.dist, amp=self.amp)
        else:
            if not self._measured:
                raise RuntimeError(
                    "Monitor.record: the training forward was not captured (use training_forward)"
                )
            comps, stats = _stats_of(self._mon.result(reset=True))
            self._measured = False
            stats = self.dist.sum_(stats.to(_reduce_device(self.model)).contiguous()).cpu()
            summary = summarize_stats(comps, stats)
        loss_t = self.dist.sum_(loss.detach().float().reshape(1).clone()) / self.dist.world
        gn = grad_norms if grad_norms is not None else self.grad_norms()
        gn_values = torch.stack(list(gn.values())).tolist() if gn else []
        rec = {
            "kind": "monitor", "iter": it, "step": it, "loss": float(loss_t.item()), "lr": float(lr),
            "grad_norm": dict(zip(gn.keys(), gn_values, strict=True)),
            "source": "probe" if self.probe is not None else "halves",
        }
        rec.update(summary)
        return rec


def component_means(record: Mapping) -> dict[str, float]:
    """``{component: plasticity}`` (mean over layers) of a monitor record, components in paper order."""
    means = record.get("plasticity_mean", {})
    return {c: means[c] for c in COMPONENTS if c in means and not math.isnan(means[c])}
