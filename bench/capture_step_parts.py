"""Where the time a capture step adds to the plain forward goes, on CPU: clocks inside the step.

`step_parts` runs a plain ``no_grad`` forward and the step `bench.end_to_end` times (one capture built
before the steps and attached for each: attach, forward, detach, ``pairwise_plasticity``, host read)
in interleaved rounds, with the same clocks in both:

- ``modules``: the component modules' own forwards (the model's linear, attention and norm kernels of
  the modules the capture hooks; their hooks run outside these clocks);
- ``op_calls``: the paired-op calls inside the hooks (op layer and kernel, on the spot);
- ``bookkeeping``: the rest of the hooks' time (sharing, rows, the end-of-forward statistics);
- ``other``: the rest of the forward (the model's other kernels: residual adds, GELU, the embedding and
  the head; calling the hooks: ``nn.Module``'s slow path for a module with hooks, the root hooks);
- ``setup``: attaching the kept capture; ``result``: detaching, ``pairwise_plasticity``, the host read.

Every part is reported as the median over rounds of (capture step - plain forward) in that part (0 for
the plain forward where it has no such part), beside ``added``, the median of the whole steps'
differences; ``residual`` = added - the sum of the parts: what the medians do not split (noise). A
positive ``modules`` or ``other`` is the model's own work slowed by the capture (caches, allocator);
``faults``: the median difference of minor page faults per step. The clocks add ~1 us per module call to
both variants.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator

import torch

import vitplast_kernels as vk

from .eager_capture_profile import timed_calls, timed_hooks
from .harness import minor_faults

PARTS = ("modules", "op_calls", "bookkeeping", "other", "setup", "result")


@contextlib.contextmanager
def timed_forwards(modules: list[torch.nn.Module], spent: dict[str, float], clock=time.perf_counter
                   ) -> Iterator[None]:
    """While open, each module's own ``forward`` (its hooks excluded) adds its time to
    ``spent["modules"]``; the modules' ``forward`` attributes are restored after."""
    saved = [(m, m.__dict__.get("forward")) for m in modules]
    for m in modules:
        m.forward = timed_calls(m.forward, spent, "modules", clock)
    try:
        yield
    finally:
        for m, own in saved:
            del m.forward
            if own is not None:
                m.forward = own


def _one(model, images, cap, spent, clock) -> dict[str, float]:
    """Seconds of each part of one step (``cap`` None: the plain forward) and its minor faults."""
    for k in spent:
        spent[k] = 0.0
    f0 = minor_faults()
    t0 = clock()
    if cap is not None:
        cap.attach()
    t1 = clock()
    with torch.no_grad():
        model(images)
    t2 = clock()
    if cap is not None:
        cap.detach()
        vk.pairwise_plasticity(cap).stats.cpu()
    t3 = clock()
    forward = t2 - t1
    return {"total": t3 - t0, "modules": spent["modules"], "op_calls": spent["op"],
            "bookkeeping": spent["hooks"] - spent["op"], "other": forward - spent["modules"] - spent["hooks"],
            "setup": t1 - t0, "result": t3 - t2, "faults": float(minor_faults() - f0)}


def step_parts(model: torch.nn.Module, images: torch.Tensor, reps: int = 5, clock=time.perf_counter
               ) -> dict[str, float]:
    """Medians over ``reps`` interleaved rounds of (capture step - plain forward): ``added`` (seconds),
    each of `PARTS` (seconds), ``residual`` (added - the parts) and ``faults`` (per step). ``clock``:
    the wall clock, or ``time.thread_time`` (with one torch thread: the step's own CPU time, without
    what other processes take from it). Restores what it wraps."""
    cap = vk.capture(model)
    named = dict(model.named_modules())
    hooked = [named[n] for per_layer in cap.modules.values() for names in per_layer.values() for n in names]
    spent = {"hooks": 0.0, "op": 0.0, "modules": 0.0}
    sq_sums = cap.pairing.sq_sums

    def timed_sq_sums(tensors, **kw):
        s = clock()
        try:
            return sq_sums(tensors, **kw)
        finally:
            spent["op"] += clock() - s

    cap.pairing.sq_sums = timed_sq_sums
    diffs: dict[str, list[float]] = {k: [] for k in ("added", *PARTS, "faults")}
    with timed_hooks(spent, clock), timed_forwards(hooked, spent, clock):
        for _ in range(2):  # warm-up: the capture's accumulators and constants, the allocator
            _one(model, images, None, spent, clock)
            _one(model, images, cap, spent, clock)
        for r in range(reps):
            order = (None, cap) if r % 2 == 0 else (cap, None)
            got = {id(c): _one(model, images, c, spent, clock) for c in order}
            plain, step = got[id(None)], got[id(cap)]
            diffs["added"].append(step["total"] - plain["total"])
            for k in (*PARTS, "faults"):
                diffs[k].append(step[k] - plain[k])
    out = {k: statistics.median(v) for k, v in diffs.items()}
    out["residual"] = out["added"] - sum(out[k] for k in PARTS)
    return out
