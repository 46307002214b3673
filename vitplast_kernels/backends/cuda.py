"""``backend="cuda"`` (the CUDA C++ kernels of ``vitplast_kernels._C_cuda``) and the GPU ``"auto"`` choice.

The CUDA kernels implement the ``vitplast::pair_sq_distances`` / ``pair_sq_distances_grouped`` ops for
CUDA tensors (the dispatcher routes by device); their fakes and autograd formulas live in ``ops/paired.py``.

``backend="auto"`` on CUDA tensors is a fixed plan: ``cuda`` when the CUDA extension is built (the
faster of the two in the GPU benchmarks, ``bench/gpu_paired.py``), else ``triton``, else ``torch``.
The two kernels sum in different orders, so a timing-based choice could give different bits in two
processes; it is therefore an explicit opt-in: ``VITPLAST_AUTOTUNE=1`` times both once per GPU (bf16
inputs shaped like a ViT-Huge capture) and keeps the faster, which is **not bitwise repeatable across
processes**. ``VITPLAST_GPU_BACKEND=cuda|triton|torch`` names the backend outright.
"""

from __future__ import annotations

import torch

from ..environment import AUTOTUNE, GPU_BACKEND, choice, switch
from ..timing import median_ms
from .cpu import dispatcher_grouped, dispatcher_pair_sq
from .extension import cuda_extension_available, require_cuda_extension
from .registry import BACKENDS, Backend, register_auto, register_backend, usable

ENV_OVERRIDE = GPU_BACKEND
ENV_AUTOTUNE = AUTOTUNE
_CHOICES: dict[int, str] = {}  # CUDA device index -> backend name
_TIMINGS: dict[int, dict[str, float]] = {}  # CUDA device index -> backend -> median ms (for reports)


register_backend(Backend("cuda", ("cuda",), cuda_extension_available, require_cuda_extension,
                         dispatcher_pair_sq, dispatcher_grouped))


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
            if not usable(name):
                continue
            backend = BACKENDS[name]

            def work(backend=backend):
                backend.pair_sq(big[:32], big[32:])
                backend.grouped(xs, ys)

            work()  # compiles / loads kernels
            torch.cuda.synchronize()
            result[name] = median_ms(work, device=torch.device("cuda", device))
    return result


def autotune_enabled() -> bool:
    """Whether timing-based plans are allowed (``VITPLAST_AUTOTUNE=1``: faster, not bitwise repeatable);
    read at each call, ValueError for a value it does not accept."""
    return switch(ENV_AUTOTUNE)


@torch.compiler.assume_constant_result  # evaluated once while torch.compile traces, not traced
def choose() -> str:
    """The backend name ``"auto"`` resolves to for CUDA tensors (see module docstring)."""
    forced = choice(ENV_OVERRIDE)
    if forced:
        return forced
    names = [name for name in ("cuda", "triton") if usable(name)]
    if not names:
        return "torch"
    if len(names) == 1 or not torch.cuda.is_available() or not autotune_enabled():
        return names[0]
    if torch.cuda.is_current_stream_capturing():
        return names[0]  # no timing inside CUDA-graph capture; measured on the next eager call
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
