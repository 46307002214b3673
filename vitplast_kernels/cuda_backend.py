"""``backend="cuda"`` (the CUDA C++ kernels of ``vitplast_kernels._C_cuda``) and the GPU ``"auto"`` choice.

The CUDA kernels implement the ``vitplast::pair_sq_distances`` / ``pair_sq_distances_grouped`` ops for
CUDA tensors (the dispatcher routes by device); their fakes live in ``_library.py``.

``backend="auto"`` on CUDA tensors picks the faster of ``cuda`` and ``triton``, measured once per GPU
(on bfloat16 inputs shaped like a ViT-Huge capture: one ``(32, 257, 1280)`` pair plus a grouped call)
and cached in memory. ``VITPLAST_GPU_BACKEND=cuda|triton|torch`` overrides the measurement. The
choice is made for the current CUDA device (``torch.cuda.current_device()``), since the chooser is not
told the tensors' device; both backends are correct on every device, only speed depends on it.
"""

from __future__ import annotations

import os
import statistics

import torch

from ._extension import cuda_extension_available, require_cuda_extension
from .backends import (
    _BACKENDS,
    Backend,
    dispatcher_grouped,
    dispatcher_pair_sq,
    register_auto,
    register_backend,
)

ENV_OVERRIDE = "VITPLAST_GPU_BACKEND"
_CHOICES: dict[int, str] = {}  # CUDA device index -> backend name
_TIMINGS: dict[int, dict[str, float]] = {}  # CUDA device index -> backend -> median ms (for reports)


register_backend(Backend("cuda", ("cuda",), cuda_extension_available, require_cuda_extension,
                         dispatcher_pair_sq, dispatcher_grouped))


def _usable(name: str) -> bool:
    backend = _BACKENDS.get(name)
    return backend is not None and backend.available()


def _median_ms(fn, reps: int = 7) -> float:
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(device: int | None = None) -> dict[str, float]:
    """Median milliseconds of each usable GPU backend on a capture-like bf16 workload (synchronises)."""
    device = torch.cuda.current_device() if device is None else device
    gen = torch.Generator(device=f"cuda:{device}").manual_seed(0)
    with torch.cuda.device(device):
        big = torch.randn((64, 257, 1280), device="cuda", dtype=torch.bfloat16, generator=gen)
        group = [torch.randn((16, 257, w), device="cuda", dtype=torch.bfloat16, generator=gen)
                 for w in (1280,) * 5 + (5120,) * 2]
        xs, ys = [t[:8] for t in group], [t[8:] for t in group]
        result = {}
        for name in ("cuda", "triton"):
            if not _usable(name):
                continue
            backend = _BACKENDS[name]

            def work(backend=backend):
                backend.pair_sq(big[:32], big[32:])
                backend.grouped(xs, ys)

            work()  # compiles / loads kernels
            torch.cuda.synchronize()
            result[name] = _median_ms(work)
    return result


@torch.compiler.assume_constant_result  # evaluated once while torch.compile traces, not traced
def choose() -> str:
    """The backend name ``"auto"`` resolves to for CUDA tensors (see module docstring)."""
    forced = os.environ.get(ENV_OVERRIDE, "").strip().lower()
    if forced:
        if forced not in ("cuda", "triton", "torch"):
            raise ValueError(f"{ENV_OVERRIDE} must be 'cuda', 'triton' or 'torch', got {forced!r}")
        return forced
    usable = [name for name in ("cuda", "triton") if _usable(name)]
    if not usable:
        return "torch"
    if len(usable) == 1 or not torch.cuda.is_available():
        return usable[0]
    if torch.cuda.is_current_stream_capturing():
        return usable[0]  # no timing inside CUDA-graph capture; measured on the next eager call
    device = torch.cuda.current_device()
    if device not in _CHOICES:
        timings = measure(device)
        _TIMINGS[device] = timings
        _CHOICES[device] = min(timings, key=timings.get)
    return _CHOICES[device]


def auto_timings() -> dict[int, dict[str, float]]:
    """Per CUDA device: the measured median ms of each backend behind the ``"auto"`` choice."""
    return {k: dict(v) for k, v in _TIMINGS.items()}


register_auto("cuda", choose)
