"""One benchmark harness for every table in bench/: timing, the machine's own floors, records.

- ``time_fn(fn, device=...)`` -> ``Timing`` (median, q10, q90 seconds of one call) and
  ``time_interleaved`` (several functions in rotated rounds), both timed by ``vitplast_kernels.timing``
  (the package's one timing helper). On CUDA a batch of R back-to-back calls (R sized so a batch takes
  >= ~2 ms) is bracketed by two CUDA events and the per-call time is elapsed / R: throughput with the
  host running ahead, as a training loop sees it (host overhead counts only when it exceeds the GPU
  time). On CPU ``time.perf_counter`` per call.
- Floors measured in the same run as the numbers they normalise: ``read_bandwidth`` (bytes/s of the
  best of a few large read-only reductions: what a memory-bound reduction can reach at most),
  ``copy_bandwidth`` (``dst.copy_(src)``, read + write bytes counted), ``matmul_rate`` (FLOP/s of a
  large ``torch.mm``).
- ``machine_info()``: CPU, cores, GPU, versions and date, stored beside every number.
- ``pin_allocator()``: glibc's malloc with a fixed mmap threshold and no trimming, so that CPU timings
  of eager forwards measure the work, not page faults (see its docstring).
- ``format_table`` / ``print_table`` for the printed tables, ``write_json`` (atomic) for the records.

Timings on shared machines are noisy: report medians and ratios measured in one run.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from vitplast_kernels import timing
from vitplast_kernels.atomic_io import atomic_write_bytes


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and the 10% / 90% quantiles over ``reps`` timed calls."""

    median: float
    q10: float
    q90: float
    reps: int
    times: tuple[float, ...] = field(repr=False, default=())

    def to_dict(self) -> dict[str, float | int]:
        d = asdict(self)
        d.pop("times")
        return d


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted, non-empty sequence."""
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def _timing(times: Sequence[float]) -> Timing:
    s = sorted(times)
    return Timing(statistics.median(s), _quantile(s, 0.1), _quantile(s, 0.9), len(s), tuple(times))


def _device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available on this machine")
    return dev


def time_fn(
    fn: Callable[[], Any],
    *,
    device: str | torch.device = "cpu",
    warmup: int = 2,
    reps: int | None = None,
    min_time: float = 0.3,
    min_reps: int = 5,
    max_reps: int = 200,
    cuda_batch_s: float = 2e-3,
    max_batch: int = 1000,
) -> Timing:
    """Times ``fn()`` (no arguments; its result is discarded).

    ``warmup`` untimed calls, then either exactly ``reps`` timed calls, or (``reps=None``) calls until
    both ``min_reps`` calls and ``min_time`` seconds have been spent, at most ``max_reps``.

    On CUDA each "call" is a batch: one call timed alone estimates the cost, then R back-to-back calls
    (R = ceil(``cuda_batch_s`` / estimate), at most ``max_batch``) are enqueued between two CUDA events
    without synchronising in between, and the sample is elapsed / R. The host runs ahead of the GPU as
    in a training loop, so a call's launch overhead is hidden when the GPU is the bottleneck and shows
    when the host is (the honest number for asynchronous use; a lone synchronised call would add the
    launch latency to every sample). ``Timing.reps`` counts batches.
    """
    dev = _device(device)
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if reps is not None and reps < 1:
        raise ValueError(f"reps must be >= 1 or None, got {reps}")
    for _ in range(warmup):
        fn()
    batch = 1
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        batch = timing.calls_per_sample(fn, dev, min_sample_ms=cuda_batch_s * 1e3, max_calls=max_batch)
    times: list[float] = []
    spent = 0.0
    while True:
        t = timing.time_once_ms(fn, dev, calls=batch) / 1e3
        times.append(t)
        spent += t * batch  # the whole batch's time counts towards min_time
        n = len(times)
        if reps is not None:
            if n >= reps:
                break
        elif (n >= min_reps and spent >= min_time) or n >= max_reps:
            break
    return _timing(times)


def time_interleaved(
    fns: dict[str, Callable[[], Any]],
    *,
    device: str | torch.device = "cpu",
    warmup: int = 1,
    min_time: float = 0.3,
    min_rounds: int = 5,
    max_rounds: int = 100,
    min_sample: float | None = None,
    settle: int = 0,
) -> dict[str, Timing]:
    """Times several functions in interleaved rounds (one sample of each per round, order rotated and
    reversed every other cycle: ``vitplast_kernels.timing.round_order``; ``settle`` untimed calls
    before each sample, see ``vitplast_kernels.timing.interleaved_samples``).

    On a shared machine the load changes from second to second; interleaving gives every function
    the same share of it, so the ratios of the medians are far steadier than back-to-back runs.
    Stops after ``min_rounds`` rounds once ``min_time`` seconds have been spent in total.
    A sample is ``k`` back-to-back calls, ``k`` chosen per function (after warm-up) so that a sample
    lasts at least ``min_sample`` seconds (default: 2 ms on CUDA, where one short kernel is shorter than
    the event resolution and launch jitter; one call on CPU); times are per call.
    """
    dev = _device(device)
    if min_sample is None:
        min_sample = 2e-3 if dev.type == "cuda" else 0.0
    samples = timing.interleaved_samples(fns, device=dev, rounds=min_rounds, warmup=warmup,
                                         min_time_ms=min_time * 1e3, max_rounds=max_rounds,
                                         min_sample_ms=min_sample * 1e3, settle=settle)
    return {n: _timing([t / 1e3 for t in ts]) for n, ts in samples.items()}


def per_round_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """Median over rounds of ``num[r] / den[r]`` (samples of two functions timed in the same rounds):
    robust to the machine's drift between rounds, which a ratio of two medians is not."""
    return statistics.median(n / d for n, d in zip(num, den, strict=True))


# --- the machine's own floors -----------------------------------------------------------------


def floor_probe(device: str | torch.device = "cpu", nbytes: int | None = None
                ) -> tuple[Callable[[], Any], int, str]:
    """``(fn, bytes_moved, name)``: one call of the floor measurement, to interleave with a kernel.

    CPU: ``amax`` over a float32 buffer of ``nbytes`` (default 256 MiB, far larger than any cache),
    read once. CUDA: ``dst.copy_(src)`` of ``nbytes`` (default 1 GiB), read + write counted.
    """
    dev = _device(device)
    if dev.type == "cuda":
        nbytes = nbytes or 2**30
        src = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 2 * tensor_bytes(src), "copy bandwidth"
    nbytes = nbytes or 256 * 2**20
    buf = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    return (lambda: torch.amax(buf)), tensor_bytes(buf), "read bandwidth"


def read_bandwidth(device: str | torch.device = "cpu", nbytes: int = 512 * 2**20, reps: int = 5) -> float:
    """Bytes/s of the best of a few large read-only reductions (``sum``, ``amax``) over ``nbytes``.

    The ceiling of any reduction that reads its inputs once: the % columns divide by it.
    """
    dev = _device(device)
    buf = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    best = float("inf")
    for reduce in (torch.sum, torch.amax):
        t = time_fn(lambda r=reduce: r(buf), device=dev, warmup=1, reps=reps)
        best = min(best, t.median)  # medians, like every timing it normalises
    return buf_bytes(nbytes // 4, torch.float32) / best


def copy_bandwidth(device: str | torch.device = "cuda", nbytes: int = 1024 * 2**20, reps: int = 10) -> float:
    """Bytes/s of ``dst.copy_(src)`` over ``nbytes`` buffers, counting read + write (2 x nbytes)."""
    dev = _device(device)
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), device=dev, warmup=2, reps=reps)
    return 2 * buf_bytes(nbytes // 4, torch.float32) / t.median


def matmul_rate(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, n: int | None = None,
                reps: int = 5) -> float:
    """FLOP/s (2 n^3 per product) of ``torch.mm`` of two ``(n, n)`` matrices of ``dtype``."""
    dev = _device(device)
    if n is None:
        n = 8192 if dev.type == "cuda" else 1024
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    t = time_fn(lambda: torch.mm(a, b), device=dev, warmup=2, reps=reps)
    return 2 * n**3 / t.median


def buf_bytes(numel: int, dtype: torch.dtype) -> int:
    return numel * torch.empty((), dtype=dtype).element_size()


def tensor_bytes(*tensors: torch.Tensor) -> int:
    """Bytes a kernel must read to see every element of ``tensors`` once (logical sizes, not storage)."""
    return sum(t.numel() * t.element_size() for t in tensors)


# --- machine record -----------------------------------------------------------------------------


# glibc mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's ceiling on 64-bit systems


def pin_allocator() -> str:
    """Fixes glibc malloc's mmap threshold at 32 MiB and switches trimming off; returns a line saying
    what was done (or why nothing was).

    By default glibc moves its mmap threshold as blocks are freed and returns the heap's top to the
    system, so the same eager ViT forward can take from none to tens of thousands of minor page faults
    (a fifth of a CPU forward's time), depending on what ran before it in the process, and any hook
    that allocates changes the pattern: two timed variants of one forward then differ by the
    allocator's state more than by their work. With the threshold fixed and trimming off, freed
    memory stays with the process and is normally reused. Not a guarantee (fragmentation can still
    make a heap grow onto fresh pages), and what an application sees depends on its own allocator."""
    import ctypes
    import ctypes.util

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "allocator: default (not glibc)"
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
    if not ok:
        return "allocator: default (mallopt refused)"
    return "allocator: glibc malloc pinned (mmap threshold 32 MiB, no trim; --allocator default to keep it)"


ALLOCATORS = ("pinned", "default")  # the --allocator choices of the CPU benchmarks


def set_allocator(choice: str) -> str:
    """``--allocator``: ``"pinned"`` calls `pin_allocator`, ``"default"`` leaves malloc as it is;
    returns the line saying which."""
    return pin_allocator() if choice == "pinned" else "allocator: default"


def minor_faults() -> int:
    """Minor page faults of this process so far (0 where the platform does not count them)."""
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None
    return getattr(mod, "__version__", "unknown")


def machine_info(device: str | torch.device | None = None) -> dict[str, Any]:
    """CPU model, cores, threads, GPU name, torch/triton/timm/package versions, date (UTC)."""
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "triton": _version("triton"),
        "timm": _version("timm"),
        "vitplast_kernels": _version("vitplast_kernels"),
        "gpu": None,
        "loadavg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        idx = torch.device(device).index if device is not None else None
        idx = torch.cuda.current_device() if idx is None else idx
        info["gpu"] = torch.cuda.get_device_name(idx)
        info["gpu_capability"] = ".".join(map(str, torch.cuda.get_device_capability(idx)))
    return info


def machine_line(info: dict[str, Any]) -> str:
    """One printable line naming the machine and versions of ``info``."""
    hw = f"{info['cpu']} ({info['cpu_cores']} cores, {info['torch_threads']} torch threads)"
    if info.get("gpu"):
        hw = f"{info['gpu']} (sm_{info.get('gpu_capability', '?').replace('.', '')}) + {hw}"
    load = info.get("loadavg_1min")
    return (f"{hw}; torch {info['torch']}, triton {info['triton']}, "
            f"vitplast_kernels {info['vitplast_kernels']}; {info['date']}"
            + (f"; load average {load:.1f}" if load is not None else ""))


def load_warning(info: dict[str, Any]) -> str | None:
    """A warning when other processes hold the CPUs (load average above the core count): multithreaded
    CPU timings then include waits for descheduled OpenMP threads; ``--threads 1`` is steadier."""
    load, cores = info.get("loadavg_1min"), info.get("cpu_cores") or 1
    if load is None or load <= cores:
        return None
    threads = info.get("torch_threads") or 1
    waits = (f"; with {threads} threads CPU times include waits for descheduled threads (--threads 1 is "
             "steadier)" if threads > 1 else "")
    return (f"WARNING: load average {load:.1f} on {cores} cores: other processes share the CPUs, absolute "
            f"times are inflated and noisy, ratios from interleaved rounds are steadier{waits}")


# --- tables and records -------------------------------------------------------------------------


def _cell(v: Any, fmt: str | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:  # NaN
            return "nan"
        return format(v, fmt) if fmt else f"{v:.3g}"
    return str(v)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str | None]]) -> str:
    """A fixed-width text table. ``columns``: (key in row, header, format spec or None)."""
    cells = [[_cell(r.get(k), f) for k, _, f in columns] for r in rows]
    heads = [h for _, h, _ in columns]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]
    first = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths,
                                                                                             strict=True)))
    lines = [first, "  ".join("-" * w for w in widths)]
    for c in cells:
        lines.append("  ".join(x.ljust(w) if i == 0 else x.rjust(w)
                               for i, (x, w) in enumerate(zip(c, widths, strict=True))))
    return "\n".join(lines)


def print_table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str | None]],
                note: str | None = None) -> None:
    print(f"\n## {title}")
    if note:
        print(note)
    print(format_table(rows, columns), flush=True)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Writes ``obj`` as JSON to ``path`` atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    text = json.dumps(obj, indent=2, default=_json_default) + "\n"
    atomic_write_bytes(path, text.encode())
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, Timing):
        return o.to_dict()
    if isinstance(o, torch.dtype):
        return str(o).removeprefix("torch.")
    if isinstance(o, torch.device | Path):
        return str(o)
    raise TypeError(f"cannot write {type(o).__name__} to JSON")


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Max relative error of ``actual`` against ``expected`` (both (B,), compared in float64 on host)."""
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    return ((a - e).abs() / e.abs().clamp_min(1e-300)).max().item()
