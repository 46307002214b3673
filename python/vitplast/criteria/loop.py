"""The one measuring loop of the commands: capture -> reduce -> result.

A `Meter` is what a criterion measures with. It is attached to the model for the whole loop
(`Meter.attach`, e.g. plasticity's forward hooks), then fed one **unit of work** at a time, a
`Batch` (images and, for criteria that need them, labels): `Meter.step` runs what the
criterion needs on it (a forward under ``no_grad``, or a forward and a backward), reducing what it
captured to running sums. `Meter.chunk` closes the sums of the batches since the last chunk (the
resampling units of a bootstrap) and `Meter.result` gives the result. A criterion that needs only
the weights feeds no batch: the loop runs zero steps and its result is read from the weights.

`measuring_loop` is that loop, used by ``vitplast measure``, ``vitplast claim`` (one chunk per
batch) and ``vitplast finetune --train auto``; `PlasticityMeter` is plasticity's meter.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

import vitplast_kernels as vk
from vitplast_kernels.measure.chunks import ChunkedResult


@dataclasses.dataclass(frozen=True)
class Batch:
    """One unit of work: ``images`` ``(N, ...)`` and, for criteria that need them, ``labels`` ``(N,)``."""

    images: torch.Tensor
    labels: torch.Tensor | None = None


class Meter(Protocol):
    """What the loop drives (see the module docstring)."""

    def attach(self, net: torch.nn.Module) -> contextlib.AbstractContextManager: ...
    def step(self, net: torch.nn.Module, batch: Batch) -> None: ...
    def chunk(self) -> Any: ...
    def result(self) -> Any: ...
    def combine(self, chunks: list) -> Any: ...


@dataclasses.dataclass(frozen=True)
class Measured:
    """What `measuring_loop` returns: the meter's ``result``, its ``chunks`` (one per batch with
    ``chunks=True``, else empty) and the number of batches ``steps`` it was fed."""

    result: Any
    chunks: list
    steps: int


def measuring_loop(net: torch.nn.Module, meter: Meter, batches: Iterable, *, amp: Callable | None = None,
                   limit: int | None = None, chunks: bool = False, progress: bool = False,
                   desc: str = "measuring", on_error: Callable[[Exception, Batch], Exception] | None = None
                   ) -> Measured:
    """Feeds ``batches`` (`Batch` or image tensors) to ``meter`` attached to ``net``, up to
    ``limit`` of them, under ``amp`` (a context factory; None: full precision); with ``chunks`` the
    meter's `Meter.chunk` closes each batch's sums. ``on_error(exc, batch)``: the exception to
    raise instead of a ``RuntimeError`` or ``AssertionError`` of a step (None: raised as it is)."""
    from tqdm.auto import tqdm

    amp = amp or contextlib.nullcontext
    steps, closed = 0, []
    with meter.attach(net), amp():
        feed = () if limit is not None and limit <= 0 else batches
        for item in tqdm(feed, total=limit, desc=desc, disable=not progress, unit="batch", leave=False):
            batch = item if isinstance(item, Batch) else Batch(item)
            try:
                meter.step(net, batch)
            except (RuntimeError, AssertionError) as exc:
                if on_error is None:
                    raise
                raise on_error(exc, batch) from None
            steps += 1
            if chunks:
                closed.append(meter.chunk())
            if limit is not None and steps == limit:  # no batch read beyond the last one measured
                break
        result = meter.result() if not chunks or not closed else None
    if chunks and closed:
        result = meter.combine(closed)
    return Measured(result, closed, steps)


class PlasticityMeter:
    """Plasticity's meter: a ``vitplast_kernels`` capture (built by ``make_capture(net)``, or with the
    keywords ``capture_kw``), one forward without gradients per batch; chunks are the capture's result
    per batch (the capture then reset), combined into a ``vitplast_kernels.measure.chunks.ChunkedResult``."""

    def __init__(self, *, make_capture: Callable | None = None, **capture_kw: Any) -> None:
        self._make = make_capture or (lambda net: vk.capture(net, **capture_kw))
        self._capture = None

    @contextlib.contextmanager
    def attach(self, net: torch.nn.Module):
        self._capture = self._make(net)
        with self._capture:
            yield self

    def step(self, net: torch.nn.Module, batch: Batch) -> None:
        with torch.no_grad():
            net(batch.images)

    def chunk(self):
        res = self._capture.result()
        self._capture.reset()
        return res

    def result(self):
        """The capture's result; None when no forward was measured."""
        return vk.pairwise_plasticity(self._capture) if self._capture.n_forwards else None

    @staticmethod
    def combine(chunks: list):
        return ChunkedResult.from_results(chunks)


def measure_plasticity(net: torch.nn.Module, batches: Iterable, *, amp: Callable | None = None,
                       limit: int | None = None, chunks: bool = False, progress: bool = False,
                       desc: str = "plasticity", on_error=None, make_capture: Callable | None = None,
                       **capture_kw: Any) -> Measured:
    """Plasticity of ``net`` on ``batches`` (forward inputs in pairing order) through `measuring_loop` and
    a `PlasticityMeter` (``capture_kw``: ``vitplast_kernels.capture``'s keywords, or ``make_capture(net)``
    building the capture). With ``chunks`` the result keeps each batch's sums (a ``ChunkedResult``:
    ``chunk_stats``, ``replicate_means``)."""
    return measuring_loop(net, PlasticityMeter(make_capture=make_capture, **capture_kw), batches, amp=amp,
                          limit=limit, chunks=chunks, progress=progress, desc=desc, on_error=on_error)
