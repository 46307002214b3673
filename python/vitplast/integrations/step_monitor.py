"""The framework-free part of the trainer callbacks: one `vitplast_kernels.monitor` driven by
training-step events, its results turned into logger metrics, combined across ranks, accumulated
over the run and written at the end.

Event order a callback follows:

    start(model, step)    hooks attached (before the first forward, so torch.compile traces them),
                          the current step numbered ``step`` (a resumed run's, or the trainer's own
                          numbering); measuring is paused at once (sanity checks, evaluation)
    resume()              a training step begins: the monitor's own step decides if it is measured
    end_step() -> dict    an optimizer step is done: the measured result (ranks combined) as metrics
                          (or advance(), which only moves the schedule on, for a caller that reads
                          the results itself)
    pause()               no forward until the next resume() is measured (evaluation, checkpoints)
    write(dir)            plasticity.json (all measured steps merged) and optionally the figures
    stop()                hooks removed

Under ``torch.distributed`` every rank must call `end_step` on the same steps (trainers do);
a measured step whose batch some rank skipped (e.g. an odd batch with ``pairs="halves"``) is dropped
on every rank and counted in ``skipped_steps``, so no rank waits on a collective the others skip.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import vitplast_kernels as vk
from vitplast_kernels import PlasticityResult

from ..runtime.distributed import world_size


def metrics_of(result: PlasticityResult, prefix: str = "plasticity",
               per_layer: bool = True) -> dict[str, float]:
    """Flat logger metrics of a result: ``{prefix}/{component}`` (mean over layers) and, with
    ``per_layer``, ``{prefix}/{component}/layer_{label}``; undefined (NaN) values are left out."""
    out: dict[str, float] = {}
    for c in result.components:
        out[f"{prefix}/{c}"] = result.overall(c)
        if per_layer:
            out.update({f"{prefix}/{c}/layer_{layer}": value
                        for layer, value in zip(result.layers, result.mean(c).tolist(), strict=True)})
    return {k: v for k, v in out.items() if math.isfinite(v)}


def monitored_module(model: torch.nn.Module, name: str | None, who: str) -> torch.nn.Module:
    """``model``, or its submodule ``name`` (a callback's ``module=``); ValueError naming ``who``."""
    if name is None:
        return model
    try:
        return model.get_submodule(name)
    except AttributeError as exc:
        raise ValueError(f"{who}(module={name!r}): {type(model).__name__} has no such submodule") from exc


def model_name(module: torch.nn.Module) -> str:
    """A model's name for reports: timm's architecture name, a transformers config's name, else the
    class name (of the original module under ``torch.compile``)."""
    module = getattr(module, "_orig_mod", module)
    pretrained = getattr(module, "pretrained_cfg", None)
    architecture = pretrained.get("architecture") if isinstance(pretrained, dict) else None
    if isinstance(architecture, str):
        return architecture
    name = getattr(getattr(module, "config", None), "name_or_path", None)
    return name if isinstance(name, str) and name else type(module).__name__


def measured_model(root: torch.nn.Module, module_names: list[str]) -> torch.nn.Module:
    """The direct child of ``root`` holding every measured module when there is one (a LightningModule
    keeping its ViT as ``self.model``: the ViT), else ``root``."""
    firsts = {name.split(".", 1)[0] for name in module_names}
    if len(firsts) == 1 and all("." in name for name in module_names):
        child = getattr(root, next(iter(firsts)), None)
        if isinstance(child, torch.nn.Module):
            return child
    return root


class StepMonitor:
    """Drives a `vitplast_kernels.Monitor` from trainer events (see the module docstring).

    Args:
        every: measure every ``every``-th optimizer step (steps 0, k, 2k, ...).
        prefix: metric name prefix.
        per_layer: also log one metric per layer and component.
        capture_kwargs: `vitplast_kernels.capture`'s options (``protocol``, ``pairs``,
            ``components``, ``embedding``, ``tokens``, ``backend``, ...).

    Attributes: ``total`` (all measured steps merged, ranks combined; None before the first),
    ``measured_steps``, ``skipped_steps``, ``monitor`` (the underlying Monitor while started),
    ``model_name`` (of the model measured: `model_name`, recorded in the written result).
    """

    def __init__(self, every: int = 10, *, prefix: str = "plasticity", per_layer: bool = True,
                 **capture_kwargs: Any) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer (measure every k-th step), got {every!r}")
        self.every, self.prefix, self.per_layer = every, prefix, per_layer
        self.capture_kwargs = capture_kwargs
        self.monitor: vk.Monitor | None = None
        self.total: PlasticityResult | None = None
        self.measured_steps = self.skipped_steps = 0
        self._pause: contextlib.AbstractContextManager | None = None
        self._due, self._device = False, torch.device("cpu")
        self.model_name: str | None = None  # of the model measured (set by start)

    # ---------------------------------------------------------------- lifecycle
    def start(self, model: torch.nn.Module, step: int = 0, *, wrapper: bool = False) -> None:
        """Attaches the hooks to ``model`` (paused), the current step numbered ``step`` (measured when it
        is a multiple of ``every``: the step a resumed run continues at, or the trainer's number of its
        first step); a previous run's state is dropped. ``wrapper``: ``model`` wraps the network
        measured (a LightningModule), which names the result (`measured_model`)."""
        self.stop()
        self.total, self.measured_steps, self.skipped_steps = None, 0, 0
        self._device = next((t.device for t in model.parameters()), torch.device("cpu"))
        self.monitor = vk.monitor(model, every=self.every, start=step, **self.capture_kwargs)
        names = [n for per_layer in self.monitor.capture.modules.values() for ns in per_layer.values()
                 for n in ns]
        self.model_name = model_name(measured_model(model, names) if wrapper else model)
        self._due = self.monitor.active
        self.pause()

    def set_step(self, step: int) -> None:
        """Numbers the current step ``step`` (a run restored from a checkpoint after `start`)."""
        paused = self._pause is not None
        self.resume()
        self.monitor.set_step(step)
        self._due = self.monitor.active
        if paused:
            self.pause()

    def stop(self) -> None:
        """Removes the hooks (the accumulated ``total`` stays)."""
        if self.monitor is not None:
            self.resume()
            self.monitor, monitor = None, self.monitor
            monitor.detach()

    def pause(self) -> None:
        """No forward is measured until `resume` (held open across trainer events)."""
        if self.monitor is not None and self._pause is None:
            self._pause = self.monitor.measuring(False)
            self._pause.__enter__()

    def resume(self) -> None:
        """Forwards are measured again as the schedule says."""
        if self._pause is not None:
            pause, self._pause = self._pause, None
            pause.__exit__(None, None, None)

    # ---------------------------------------------------------------- steps
    @property
    def due(self) -> bool:
        """Whether the schedule measures the current step (paused or not)."""
        return self.monitor is not None and self._due

    def advance(self) -> bool:
        """Moves the schedule to the next step, leaving the pause as it was; returns `due`."""
        paused = self._pause is not None
        self.resume()  # the monitor's step counter runs on its own flag, not the paused one
        self._due = self.monitor.step()
        if paused:
            self.pause()
        return self._due

    def end_step(self) -> dict[str, float] | None:
        """Ends an optimizer step; returns its metrics when it was measured (else None)."""
        if self.monitor is None:
            return None
        self.resume()
        measured = self.monitor.active
        self.advance()
        if not measured:
            return None
        result = self.combine(self._local_result())
        if result is None:
            self.skipped_steps += 1
            return None
        self.measured_steps += 1
        self.total = result if self.total is None else self.total.merge(result)
        return metrics_of(result, self.prefix, self.per_layer)

    def _local_result(self) -> PlasticityResult | None:
        try:
            return self.monitor.result(reset=True)
        except RuntimeError:  # nothing measured on this rank (the step's batches were skipped)
            self.monitor.reset()
            return None

    def combine(self, local: PlasticityResult | None) -> PlasticityResult | None:
        """This step's result over all ranks (sums all-reduced), or None when a rank measured nothing."""
        if world_size() == 1:
            return local
        flag = torch.tensor([0 if local is None else 1], dtype=torch.int64, device=self._device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return None if int(flag.item()) == 0 else local.all_reduce()

    # ---------------------------------------------------------------- files
    def write(self, directory: str | os.PathLike, *, filename: str = "plasticity.json",
              plot: bool = False) -> list[Path]:
        """Writes the merged result (atomically) into ``directory``; returns the paths written
        (none when nothing was measured)."""
        if self.total is None:
            return []
        meta = {**self.total.meta, "model": self.model_name or self.total.meta.get("model"),
                "every": self.every, "measured_steps": self.measured_steps,
                "skipped_steps": self.skipped_steps, "world_size": world_size()}
        res = PlasticityResult(self.total.stats, self.total.components, self.total.layers,
                               heads=self.total.head_stats, meta=meta)
        paths = [Path(directory) / filename]
        res.to_json(paths[0])
        if plot:  # the curves and the layers x components heatmap
            stem = paths[0].with_suffix("")
            paths += [stem.with_suffix(".png"), stem.with_name(stem.name + "_heatmap.png")]
            res.plot(paths[1])
            res.plot(paths[2], kind="heatmap")
        return paths

    def settings(self) -> dict:
        """What this monitor measures, as plain values (a trainer's hyperparameters): ``every``,
        ``per_layer`` and the capture's options (defaults filled in, ``None`` values left out)."""
        options = {"protocol": "in_situ", "pairs": "halves", **self.capture_kwargs}
        plain = {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in options.items()
                 if v is not None}
        return {"every": self.every, "per_layer": self.per_layer, **plain}
