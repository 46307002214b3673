"""The paired table: ``vitplast_kernels.pair_sq_distances`` against the peers a user would write.

For ViT activation shapes ``(B, n, d)`` and dtypes float32 / bfloat16: bytes that must be read (both
inputs once: ``2 * B * n * d * itemsize``), achieved GB/s, % of the machine's floor measured in the
same run, and the speedup of ours (``backend="auto"``) over

- ``eager``: the paper's ``((x - y) ** 2).flatten(1).sum(-1).sqrt()``,
- ``vector_norm``: ``torch.linalg.vector_norm(x - y, dim=(1, ..., x.dim() - 1))``,
- ``compile``: ``torch.compile`` of the eager formula (compiled before timing; compile time recorded).

Relative errors are of distances against a float64 reference of the same (already rounded) inputs.
"""

from __future__ import annotations

import time
from typing import Any

import torch

import vitplast_kernels as vk

from .harness import floor_probe, per_round_ratio, rel_error, tensor_bytes, time_interleaved

SHAPES = ((16, 197, 768), (64, 257, 1280), (32, 257, 5120))
QUICK_SHAPES = ((16, 197, 768), (64, 257, 1280))
DTYPES = (torch.float32, torch.bfloat16)


def eager(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The paper's formula, as written there: (B,) distances in the inputs' dtype."""
    return ((x - y) ** 2).flatten(1).sum(-1).sqrt()


def vector_norm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x - y, dim=tuple(range(1, x.dim())))


def reference_distances(x: torch.Tensor, y: torch.Tensor, chunk: int = 4) -> torch.Tensor:
    """(B,) float64 distances, a few pairs at a time so the float64 copies stay small."""
    parts = [vk.pair_sq_distances_reference(x[i : i + chunk], y[i : i + chunk])
             for i in range(0, x.shape[0], chunk)]
    return torch.cat(parts).sqrt()


COLUMNS = [
    ("shape", "shape (B,n,d)", None),
    ("dtype", "dtype", None),
    ("MB", "MB read", ".1f"),
    ("ours_ms", "ours ms", ".2f"),
    ("GBps", "GB/s", ".1f"),
    ("floor_GBps", "floor GB/s", ".1f"),
    ("pct_floor", "% floor", ".0f"),
    ("x_eager", "x eager", ".1f"),
    ("x_vector_norm", "x vec_norm", ".1f"),
    ("x_compile", "x compile", ".2f"),
    ("err_ours", "err ours", ".1e"),
    ("err_eager", "err eager", ".1e"),
    ("err_vector_norm", "err v_norm", ".1e"),
    ("err_compile", "err compile", ".1e"),
]


def rows(device: str, quick: bool = False, compile_peer: bool = True) -> list[dict[str, Any]]:
    """One row per (shape, dtype); times are medians of one run; ``x_<peer>`` is the median over
    interleaved rounds of the peer's time / ours in that round (each sample after one untimed call of
    the same function).

    The floor (read bandwidth on CPU, copy bandwidth on GPU, see ``harness.floor_probe``) is timed in
    the same interleaved rounds as ours and the peers, and ``pct_floor`` is the median over rounds of our
    rate / the floor's rate in that round, so the % column sees the same machine load. Per-round ratios:
    on a VM that shares its memory bandwidth, the floor itself moves by a third within minutes.
    """
    dev = torch.device(device)
    probe, probe_bytes, _ = floor_probe(dev)
    gen = torch.Generator().manual_seed(0)
    out = []
    min_time, min_rounds = (0.3, 5) if quick else (3.0, 15)
    compiled = torch.compile(eager, dynamic=False) if compile_peer else None
    for shape in QUICK_SHAPES if quick else SHAPES:
        for dtype in DTYPES:
            x = torch.randn(shape, generator=gen).to(dtype).to(dev)
            y = torch.randn(shape, generator=gen).to(dtype).to(dev)
            ref = reference_distances(x, y)
            peers = {"eager": eager, "vector_norm": vector_norm}
            row: dict[str, Any] = {"shape": "x".join(map(str, shape)),
                                   "dtype": str(dtype).removeprefix("torch.")}
            nbytes = tensor_bytes(x, y)
            row["err_ours"] = rel_error(vk.pair_sq_distances(x, y).sqrt(), ref)
            if compiled is not None:
                t0 = time.perf_counter()
                compiled(x, y)  # compile (or recompile for this shape/dtype) outside the timing
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                row["compile_s"] = time.perf_counter() - t0
                peers["compile"] = compiled
            fns = {"ours": lambda x=x, y=y: vk.pair_sq_distances(x, y), "floor": probe}
            fns.update({name: (lambda fn=fn, x=x, y=y: fn(x, y)) for name, fn in peers.items()})
            # settle=1: an untimed call of the same function before each sample, so that no sample
            # pays for the dirty cache lines of the eager peers' 100-300 MB temporaries before it
            times = time_interleaved(fns, device=dev, min_time=min_time, min_rounds=min_rounds, settle=1)
            ours = times["ours"]
            for name, fn in peers.items():
                row[f"{name}_ms"] = times[name].median * 1e3
                row[f"x_{name}"] = per_round_ratio(times[name].times, ours.times)
                row[f"err_{name}"] = rel_error(fn(x, y), ref)
            floor_bps = probe_bytes / times["floor"].median
            row.update(MB=nbytes / 1e6, floor_GBps=floor_bps / 1e9, ours_ms=ours.median * 1e3,
                       ours_q10_ms=ours.q10 * 1e3, ours_q90_ms=ours.q90 * 1e3,
                       GBps=nbytes / ours.median / 1e9, rounds=ours.reps,
                       pct_floor=100 * nbytes / probe_bytes
                       * per_round_ratio(times["floor"].times, ours.times))
            out.append(row)
            del x, y, ref
    return out
