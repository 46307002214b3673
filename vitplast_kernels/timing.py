"""The one timing helper: medians of repeated calls, on CPU (wall clock) or CUDA (events).

Used by the backends' opt-in autotuning, ``vitplast profile`` and the benchmarks in bench/.

- ``time_once_ms``: milliseconds per call of one sample of ``calls`` back-to-back calls. On CUDA the
  sample is bracketed by two events on the current stream (the host may run ahead, as in training: a
  call's launch overhead shows only when the host is the bottleneck); on CPU, or with ``wall=True``,
  ``time.perf_counter`` with the device synchronised before and after.
- ``median_ms``: median of ``reps`` samples of one function.
- ``interleaved_samples`` / ``interleaved_medians``: several functions timed in rounds (each once per
  round, order rotated, reversed every other cycle) so that their ratios see the same machine state.
- ``mark`` / ``elapsed_ms``: points in time taken inside a running computation (hooks), CUDA events on
  a CUDA device, ``perf_counter`` otherwise.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import torch

_MIN_ESTIMATE_MS = 1e-6  # floor of a one-call estimate when sizing samples (timer resolution)


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def _cuda(device: torch.device | None) -> bool:
    return device is not None and device.type == "cuda"


def time_once_ms(fn: Callable[[], object], device: torch.device | None = None, *, calls: int = 1,
                 wall: bool = False) -> float:
    """Milliseconds per call of ``calls`` back-to-back calls of ``fn`` (see the module docstring).

    ``wall=True`` uses the host clock on CUDA too (the device synchronised before and after), for work
    whose cost is on the host as much as on the device (copies to the host, Python loops).
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    if _cuda(device) and not wall:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / calls
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3 / calls


def calls_per_sample(fn: Callable[[], object], device: torch.device | None = None, *,
                     min_sample_ms: float = 0.0, max_calls: int = 1000) -> int:
    """Back-to-back calls for one sample to last at least ``min_sample_ms`` (from one timed call;
    1 when ``min_sample_ms`` is 0): a short kernel alone is below the event resolution and launch jitter."""
    if min_sample_ms <= 0:
        return 1
    one = time_once_ms(fn, device)
    return max(1, min(max_calls, math.ceil(min_sample_ms / max(one, _MIN_ESTIMATE_MS))))


def median_ms(fn: Callable[[], object], *, device: torch.device | None = None, reps: int = 7,
              warmup: int = 0) -> float:
    """Median milliseconds of ``reps`` calls of ``fn`` after ``warmup`` untimed calls."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    for _ in range(warmup):
        fn()
    return statistics.median(time_once_ms(fn, device) for _ in range(reps))


def round_order(names: Sequence[str], r: int) -> list[str]:
    """The order of round ``r`` in `interleaved_samples`: ``names`` rotated by ``r`` places in rounds
    ``0 .. n-1`` (mod ``2n``), ``names`` reversed and rotated in rounds ``n .. 2n-1``."""
    n = len(names)
    base = list(names) if (r // n) % 2 == 0 else list(reversed(names))
    shift = r % n
    return base[shift:] + base[:shift]


def interleaved_samples(fns: Mapping[str, Callable[[], object]], *, device: torch.device | None = None,
                        rounds: int = 7, warmup: int = 1, min_time_ms: float = 0.0,
                        max_rounds: int | None = None, min_sample_ms: float = 0.0,
                        wall: bool = False, settle: int = 0) -> dict[str, list[float]]:
    """Per-call milliseconds of each function of ``fns``, one sample per round, order rotated.

    ``warmup`` untimed calls of each, then at least ``rounds`` rounds and more until ``min_time_ms``
    has been spent in all samples together, at most ``max_rounds`` (default ``rounds``: exactly
    ``rounds`` rounds). A sample is ``calls_per_sample(fn, min_sample_ms=...)`` back-to-back calls,
    sized per function after the warm-up. ``settle``: untimed calls of a function right before each of
    its samples, so that no sample is the first call after another function (which may pay for the
    other's cache and allocator state).

    Order (`round_order`): rounds ``0 .. n-1`` rotate ``fns``' order, rounds ``n .. 2n-1`` rotate it
    reversed, and so on. A rotation alone keeps the cyclic order, so every sample of a function would
    follow the same other function and pay for its state (a fixed bias in every ratio); with the
    reversed rotations each function follows its two neighbours in turn.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    max_rounds = rounds if max_rounds is None else max_rounds
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    _sync(device)
    calls = {name: calls_per_sample(fns[name], device, min_sample_ms=min_sample_ms) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    spent, done = 0.0, 0
    while done < max_rounds and (done < rounds or spent < min_time_ms):
        for name in round_order(names, done):
            for _ in range(settle):
                fns[name]()
            t = time_once_ms(fns[name], device, calls=calls[name], wall=wall)
            times[name].append(t)
            spent += t * calls[name]
        done += 1
    return times


def interleaved_medians(fns: Mapping[str, Callable[[], object]], *, device: torch.device | None = None,
                        rounds: int = 7, warmup: int = 1) -> dict[str, float]:
    """Median milliseconds of each function of ``fns``, timed in ``rounds`` interleaved rounds."""
    samples = interleaved_samples(fns, device=device, rounds=rounds, warmup=warmup)
    return {name: statistics.median(ts) for name, ts in samples.items()}


def mark(device: torch.device | None = None) -> torch.cuda.Event | float:
    """A point in time: a CUDA event recorded on the current stream, else ``perf_counter`` seconds."""
    if _cuda(device):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


def elapsed_ms(start: torch.cuda.Event | float, end: torch.cuda.Event | float) -> float:
    """Milliseconds between two `mark` results (CUDA events: once ``end`` has completed)."""
    if isinstance(start, float):
        return (end - start) * 1e3
    end.synchronize()
    return start.elapsed_time(end)
