"""Every forward of a captured model is measured, or the capture raises: never a silently partial result.

Why a forward can run unmeasured: ``torch.compile`` caches the code it compiled for a frame and reuses it
for any call whose guards pass. With ``torch._dynamo.config.skip_nnmodule_hook_guards = True`` (torch's
default) the guards ignore empty hook dicts, so code compiled for a model *without* hooks (another
instance of the same class compiled first, or this model compiled and run before the capture was
attached, or before a detach and re-attach) is reused for the captured model and runs none of its hooks.

Two measures:

1. **Guard on hooks** (`.hook_guards`): while a capture is attached, ``skip_nnmodule_hook_guards``
   is ``False``, so code compiled in that time checks that the hooks it was traced with are still the
   module's: a captured model recompiles instead of reusing hook-less code (one guard per hook dict per
   call, microseconds). Importing the package changes no setting.
2. **Count and compare** (`ForwardCheck`), for code compiled before the capture was attached (or
   with the flag set back): a forward pre-hook on the model's root counts, on the host, the outermost
   root calls made while the capture was enabled wherever the root's hooks run outside a compiled graph
   (a compiled ``model.forward`` or submodule: the root's hooks run eagerly around hook-less compiled
   code); the component hooks count, on the device, the forwards they saw (measured or skipped). Where
   the root's hooks are themselves traced (``torch.compile(model)``, ``torch.compile(train_step)``,
   ``model.compile()``), a due step in which no forward was seen is a miss. Both rules apply once the
   capture's hooks have been traced at least once: an eager forward always runs its hooks, so an eager
   root call that reaches no component (a wrapper calling the root twice, another head) or an eager step
   without a forward is no miss. A monitor compares the counts at every ``step()``, a capture at
   ``result()``. The device counter is read at ``step()`` without waiting: on CUDA it is copied
   asynchronously and checked at a later ``step()`` once the copy is done (at the latest at
   ``result()``); on CPU at once.

Errors raised by a hook inside a compiled graph surface as Dynamo's ``Unsupported: Observed exception``;
so under compile, a batch that breaks ``strict=True`` is recorded (`Capture.strict_error`, a host
attribute that the compiled code sets on every call) and raised here with the package's text, outside the
graph: right after the forward when the root's hooks run eagerly, else at ``step()`` / ``result()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch


class Checked(Protocol):
    """What the check uses of a capture."""

    enabled: bool  # the hooks measure
    strict_error: str | None  # a strict=True error recorded by a compiled forward

    def forwards_seen(self) -> torch.Tensor | None:
        """Device int64 scalar: forwards whose hooks ran (measured or skipped)."""


REMEDY = (
    "Dynamo reused code compiled for a model without these hooks (another instance of the same model "
    "compiled first, or this model compiled and run before the capture was attached): code compiled while "
    "torch._dynamo.config.skip_nnmodule_hook_guards is True, torch's default, does not guard on module "
    "hooks; an attached capture sets it to False only for code compiled after it was attached. Remedy: "
    "attach the capture (or monitor) before compiling anything, or call torch._dynamo.reset() after "
    "attaching so that the model recompiles with the hooks, or set "
    "torch._dynamo.config.skip_nnmodule_hook_guards = False at the start of the program (the capture "
    "then leaves it so)."
)


class MissedForwardError(RuntimeError):
    """A forward of a captured model ran without being measured (see `.forward_check`)."""


@dataclass
class _Mark:
    step: int | None  # None: not the end of a step (result())
    due: bool  # the step was measured and never paused
    calls: int  # host count of root forwards while enabled, at the mark
    seen: Any  # int, or (pinned host tensor, CUDA event) until the copy is done


class ForwardCheck:
    """The root hooks of one capture and the comparison of forwards run with forwards seen."""

    def __init__(self, cap: Checked) -> None:
        self.cap = cap
        self.calls = 0  # root forwards while enabled, counted where the root's hooks run outside a graph
        self.traced = False  # the capture's hooks were traced by torch.compile at least once
        self._queue: list[_Mark] = []
        self._last = (0, 0)  # (calls, seen) at the last settled mark
        self._first_miss: str | None = None  # the first miss found (raised once compiled code measured)
        self._depth = 0  # root calls in flight (eager)

    def register(self, model: torch.nn.Module) -> list[Any]:
        return [model.register_forward_pre_hook(self._before),
                model.register_forward_hook(self._after, always_call=True)]

    def _before(self, module, args) -> None:
        if not torch.compiler.is_compiling():
            if self._depth == 0 and self.cap.enabled:  # the outermost call (a wrapper may re-enter it)
                self.calls += 1
            self._depth += 1

    def _after(self, module, args, output) -> None:
        if not torch.compiler.is_compiling():
            self._depth = max(0, self._depth - 1)
            if self._depth == 0:
                self.raise_strict()

    def raise_strict(self) -> None:
        """Raises the ``strict=True`` error a compiled forward recorded (the package's own text)."""
        err = self.cap.strict_error
        if err is not None:
            self.cap.strict_error = None
            raise ValueError(err)

    # ---------------------------------------------------------------- marks
    def _seen(self) -> torch.Tensor | None:
        return self.cap.forwards_seen()

    def mark(self, step: int | None, due: bool) -> None:
        """Records the counts at the end of ``step`` (no wait on the device) and settles what is ready."""
        seen = self._seen()
        if seen is None:
            return
        if seen.device.type == "cuda":
            host = torch.empty((), dtype=seen.dtype, pin_memory=True)
            host.copy_(seen, non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(seen.device))  # the stream the copy was queued on
            value: Any = (host, event)
        else:
            value = int(seen)
        self._queue.append(_Mark(step, due, self.calls, value))
        self._settle(wait=False)

    def _settle(self, wait: bool) -> None:
        while self._queue:
            m = self._queue[0]
            if isinstance(m.seen, tuple):
                host, event = m.seen
                if not wait and not event.query():
                    return
                event.synchronize()
                m.seen = int(host)
            self._queue.pop(0)
            self._judge(m)

    def _judge(self, m: _Mark) -> None:
        calls, seen = m.calls - self._last[0], m.seen - self._last[1]
        self._last = (m.calls, m.seen)
        where = "the forwards since the last check" if m.step is None else f"step {m.step}"
        if calls > seen:
            what = f"{where}: {calls} forward(s) of the captured model ran but {seen} were measured"
        elif m.step is not None and m.due and calls == 0 and seen == 0:
            what = f"{where}: it was due to be measured but no forward of the monitored model was measured"
        else:
            return
        if self._first_miss is None:
            self._first_miss = what  # before any trace it may be an eager step without forward: kept
        self._raise_if_traced()

    def _raise_if_traced(self) -> None:
        if self.traced and self._first_miss is not None:
            raise MissedForwardError(
                f"{self._first_miss}, while compiled code with the capture's hooks measured other "
                f"forwards. {REMEDY} (A due step that legitimately runs no forward of the model belongs "
                "inside monitor.measuring(False).)")

    def end_step(self, step: int, due: bool) -> None:
        """At a monitor's ``step()``: raises a pending strict error, then checks the step's forwards."""
        self._depth = 0  # no forward is in flight between steps
        self.raise_strict()
        self.mark(step, due)
        self._raise_if_traced()

    def verify(self) -> None:
        """At ``result()``: waits for every recorded count (a host sync) and raises on any miss."""
        self.raise_strict()
        self.mark(None, False)
        self._settle(wait=True)
        self._raise_if_traced()

    def reset(self) -> None:
        """The capture's counters were zeroed: start comparing anew."""
        self._queue.clear()
        self._last = (self.calls, 0)
        self._first_miss = None
