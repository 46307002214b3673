"""``monitor(model, every=k)``: a capture attached once, before ``torch.compile``, measuring every k-th step.

Usage:
    mon = vitplast_kernels.monitor(model, every=10)      # hooks registered now, before compiling
    step_fn = torch.compile(train_step)                    # or torch.compile(model)
    for images, labels in loader:
        step_fn(images, labels)                            # measured on steps 0, 10, 20, ...
        mon.step()                                         # once per training step, like a scheduler
    print(mon.result().table())

The hooks read one Python flag, ``enabled``. ``torch.compile`` guards on it, so a compiled model has at
most two variants — monitored and plain — each compiled once: toggling never recompiles, and the plain
variant's graph holds none of the capture's work. Nothing is synchronised with the host inside a step
(sums and counters are device tensors updated in place at fixed addresses), so CUDA graphs
(``mode="reduce-overhead"``) replay the monitored variant too.

Every forward of a monitored step is measured, or ``step()`` raises `MissedForwardError` naming
the step, the cause and the remedy (`.forward_check`): compiled code without the hooks (another
instance of the model compiled first, the model compiled and run before the monitor was attached) is
never reused silently. On CUDA the check reads a counter copied asynchronously, so it may raise one
``step()`` later; ``result()`` always checks everything. A due step that runs no forward of the model
counts as missed once compiled code has measured some step: run such steps inside
``measuring(False)``. ``strict=True`` errors of a compiled forward are raised at ``step()`` at the latest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .capture import Capture
from .forward_check import MissedForwardError  # noqa: F401  (raised by step(), documented here)
from .result import PlasticityResult


class Monitor:
    """A persistent `Capture` that measures the forwards of every ``every``-th step.

    ``step()`` advances the step counter (call it once per training step, after the forward);
    ``active`` says whether the forwards of the current step are measured; ``measuring()`` measures a
    block regardless of the step; ``result()`` holds everything measured since the last ``reset()``;
    ``detach()`` (or leaving a ``with`` block) removes the hooks. ``steps`` is the number of the current
    step: ``start`` at first (0 by default), measured when it is a multiple of ``every``.
    """

    def __init__(self, model: torch.nn.Module, *, every: int = 1, start: int = 0, **capture_kwargs) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer (measure every k-th step), got {every!r}")
        self.every = every
        self.capture = Capture(model, **capture_kwargs)
        self.set_step(start)
        self.capture.attach()

    def set_step(self, step: int) -> None:
        """Numbers the current step ``step`` (a resumed run's, or a trainer's own numbering): it is
        measured when ``step % every == 0``. What was measured so far stays."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an integer >= 0, got {step!r}")
        self.steps = step
        self.capture.enabled = step % self.every == 0
        self._paused = False  # measuring(False) was entered during the current step

    @property
    def active(self) -> bool:
        """Whether the forwards of the current step are measured."""
        return self.capture.enabled

    def step(self) -> bool:
        """Ends the current training step; returns whether the next one is measured. Raises
        `MissedForwardError` when a forward of a measured step was not measured (see above)."""
        due = (self.steps % self.every == 0 and self.capture.enabled and self.capture.attached
               and not self._paused)
        self._paused = False
        self.capture.forward_check.end_step(self.steps, due)
        self.steps += 1
        self.capture.enabled = self.steps % self.every == 0
        return self.capture.enabled

    @contextlib.contextmanager
    def measuring(self, enabled: bool = True) -> Iterator[Monitor]:
        """Measures (or, with ``enabled=False``, does not measure) the forwards inside the block."""
        before = self.capture.enabled
        self.capture.enabled = enabled
        self._paused = self._paused or not enabled
        try:
            yield self
        finally:
            self.capture.enabled = before

    def result(self, *, reset: bool = False) -> PlasticityResult:
        """Everything measured since the last reset; ``reset=True`` starts anew after. Checks first that no
        forward ran unmeasured (reads two device counters: the only wait on the device)."""
        res = self.capture.result()
        if reset:
            self.capture.reset()
        return res

    def reset(self) -> None:
        self.capture.reset()

    def detach(self) -> None:
        self.capture.detach()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.detach()


def monitor(model: torch.nn.Module, *, every: int = 1, start: int = 0, **capture_kwargs) -> Monitor:
    """A `Monitor` of ``model`` measuring the steps numbered ``0, every, 2 * every, ...``; the
    first step is numbered ``start`` (a resumed run's step, or 1 for a trainer counting from 1). Hooks
    are attached now, so create it before ``torch.compile``. ``capture_kwargs`` are
    `capture`'s (``protocol``, ``pairs``, ``components``, ``embedding``,
    ``per_head``, ``tokens``, ``backend``, ``strict``)."""
    return Monitor(model, every=every, start=start, **capture_kwargs)
