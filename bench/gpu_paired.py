"""GPU table of the paired kernels: ``python -m bench.gpu_paired [--quick] [--json PATH]``.

Rows, one per (case, backend) with backend = ``triton`` | ``cuda`` (the two GPU kernels):

- single pairs ``(128, 257, 1280)`` and ``(128, 257, 5120)``, bfloat16 and float32: ``x``, ``y`` of
  128 pairs each, one ``pair_sq_distances`` call;
- ``vit-h group``: 160 tensors as a ViT-Huge forward captures them (per block 5 of width 1280 and 2 of
  width 5120, 257 tokens, bfloat16), B = 32 pairs each (halves of a batch of 64), reduced by one
  ``pair_sq_distances_grouped`` call, against a Python loop of each peer over the 160 tensors.

Columns: MB read (both inputs once: only bytes that must move), ms (median), GB/s, % copy = GB/s over
the copy bandwidth (``dst.copy_(src)``, read + write counted) timed in the same interleaved rounds,
speedups (peer time / ours) over the paper's eager ``((x - y) ** 2).flatten(1).sum(-1).sqrt()``,
``torch.linalg.vector_norm(x - y, dim=...)``, ``torch.compile`` of the eager formula, and for the group
a loop of our own single-pair kernel; err = max relative error of the distances vs float64.
Importable: ``rows(quick) -> list[dict]`` (used by bench.compare), ``COLUMNS``, ``NOTE``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch

import vitplast_kernels as vk

from .harness import (
    floor_probe,
    machine_info,
    machine_line,
    print_table,
    rel_error,
    tensor_bytes,
    time_interleaved,
    write_json,
)

BACKENDS = ("triton", "cuda")
SINGLE_SHAPES = ((128, 257, 1280), (128, 257, 5120))
GROUP_TENSORS, GROUP_PAIRS, GROUP_TOKENS = 160, 32, 257
GROUP_WIDTHS = (1280,) * 5 + (5120,) * 2  # one ViT-Huge block: LN1/MHA/LN2/FC2 outs.., FC1 out (4d)

COLUMNS = [
    ("case", "case", None),
    ("dtype", "dtype", None),
    ("backend", "backend", None),
    ("MB", "MB read", ".0f"),
    ("ms", "ms", ".3f"),
    ("GBps", "GB/s", ".0f"),
    ("copy_GBps", "copy GB/s", ".0f"),
    ("pct_copy", "% copy", ".0f"),
    ("x_eager", "x eager", ".2f"),
    ("x_vector_norm", "x vec_norm", ".2f"),
    ("x_compile", "x compile", ".2f"),
    ("x_loop_ours", "x loop ours", ".2f"),
    ("err", "err", ".1e"),
]
NOTE = ("GPU kernels; ms = per call in batches of >= 2 ms of back-to-back calls between two CUDA events "
        "(host running ahead, as in training); x peer = peer time / ours (medians of interleaved rounds); "
        "MB read = both inputs "
        "once; % copy = GB/s / copy bandwidth (read + write bytes) timed in the same rounds; group = one "
        "grouped launch for 160 tensors vs a Python loop of each peer; err = max rel. error of distances "
        "vs float64")


def eager(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The paper's formula, as written there."""
    return ((x - y) ** 2).flatten(1).sum(-1).sqrt()


def vector_norm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x - y, dim=tuple(range(1, x.dim())))


def _reference(x: torch.Tensor, y: torch.Tensor, chunk: int = 8) -> torch.Tensor:
    return torch.cat([vk.pair_sq_distances_reference(x[i:i + chunk], y[i:i + chunk])
                      for i in range(0, x.shape[0], chunk)]).sqrt()


def _backends() -> list[str]:
    names = []
    for name in BACKENDS:
        try:
            one = torch.ones(1, 1, device="cuda")
            vk.pair_sq_distances(one, one, backend=name)
            names.append(name)
        except (RuntimeError, ValueError) as exc:
            print(f"# backend {name} unavailable: {exc}", file=sys.stderr)
    return names


def _rows_for_case(case: str, dtype: torch.dtype, nbytes: int, ours: dict[str, Any],
                   peers: dict[str, Any], errors: dict[str, float], probe, probe_bytes: int,
                   min_time: float) -> list[dict[str, Any]]:
    fns = {f"ours_{n}": fn for n, fn in ours.items()} | peers | {"floor": probe}
    times = time_interleaved(fns, device="cuda", min_time=min_time)
    copy_bps = probe_bytes / times["floor"].median
    out = []
    for name in ours:
        t = times[f"ours_{name}"].median
        row: dict[str, Any] = {"case": case, "dtype": str(dtype).removeprefix("torch."), "backend": name,
                               "MB": nbytes / 1e6, "ms": t * 1e3, "GBps": nbytes / t / 1e9,
                               "copy_GBps": copy_bps / 1e9, "pct_copy": 100 * nbytes / t / copy_bps,
                               "err": errors[name]}
        for peer in peers:
            row[f"x_{peer}"] = times[peer].median / t
            row[f"{peer}_ms"] = times[peer].median * 1e3
        out.append(row)
    return out


def _single_case(x, y, names, compiled, probe, probe_bytes, min_time) -> list[dict[str, Any]]:
    ref = _reference(x, y)
    compiled(x, y)  # compile outside the timing
    ours = {n: (lambda n=n: vk.pair_sq_distances(x, y, backend=n)) for n in names}
    errors = {n: rel_error(vk.pair_sq_distances(x, y, backend=n).sqrt(), ref) for n in names}
    peers = {"eager": lambda: eager(x, y), "vector_norm": lambda: vector_norm(x, y),
             "compile": lambda: compiled(x, y)}
    return _rows_for_case("x".join(map(str, x.shape)), x.dtype, tensor_bytes(x, y), ours, peers, errors,
                          probe, probe_bytes, min_time)


def vit_h_group(dev: torch.device, gen: torch.Generator,
                dtype: torch.dtype) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The 160 tensors of a ViT-H forward as capture hands them over: halves of one batch each."""
    xs, ys = [], []
    for g in range(GROUP_TENSORS):
        w = GROUP_WIDTHS[g % len(GROUP_WIDTHS)]
        t = torch.randn((2 * GROUP_PAIRS, GROUP_TOKENS, w), device=dev, generator=gen, dtype=dtype)
        xs.append(t[:GROUP_PAIRS])
        ys.append(t[GROUP_PAIRS:])
    return xs, ys


def rows(quick: bool = False) -> list[dict[str, Any]]:
    """The table's rows (needs a CUDA device). ``quick``: bfloat16 singles only, shorter timing."""
    if not torch.cuda.is_available():
        raise RuntimeError("bench.gpu_paired needs a CUDA device")
    dev = torch.device("cuda")
    probe, probe_bytes, _ = floor_probe(dev)
    names = _backends()
    min_time = 0.3 if quick else 1.0
    compiled = torch.compile(eager, dynamic=False)
    gen = torch.Generator(device=dev).manual_seed(0)
    out: list[dict[str, Any]] = []

    for shape in SINGLE_SHAPES:
        for dtype in (torch.bfloat16,) if quick else (torch.bfloat16, torch.float32):
            x = torch.randn(shape, device=dev, generator=gen).to(dtype)
            y = torch.randn(shape, device=dev, generator=gen).to(dtype)
            out += _single_case(x, y, names, compiled, probe, probe_bytes, min_time)
            del x, y

    dtype = torch.bfloat16
    xs, ys = vit_h_group(dev, gen, dtype)
    for x, y in zip(xs[: len(GROUP_WIDTHS)], ys[: len(GROUP_WIDTHS)], strict=True):
        compiled(x, y)  # one compile per distinct shape, outside the timing
    torch.cuda.synchronize()
    errors = {}
    for n in names:
        got = vk.pair_sq_distances_grouped(xs, ys, backend=n).sqrt()
        errors[n] = max(rel_error(got[g], _reference(x, y))
                        for g, (x, y) in enumerate(zip(xs, ys, strict=True)))
    ours = {n: (lambda n=n: vk.pair_sq_distances_grouped(xs, ys, backend=n)) for n in names}

    def loop(fn):
        return lambda: [fn(x, y) for x, y in zip(xs, ys, strict=True)]

    peers = {"eager": loop(eager), "vector_norm": loop(vector_norm), "compile": loop(compiled)}
    for n in names:
        peers[f"loop_{n}"] = loop(lambda x, y, n=n: vk.pair_sq_distances(x, y, backend=n))
    group_rows = _rows_for_case(f"vit-h group {GROUP_TENSORS}x(32 pairs)", dtype, tensor_bytes(*xs, *ys),
                                ours, peers, errors, probe, probe_bytes, min_time)
    for row in group_rows:
        row["x_loop_ours"] = row.pop(f"x_loop_{row['backend']}")
        for n in names:
            row.pop(f"x_loop_{n}", None)
    out += group_rows
    return out


CHUNK_SWEEP = (16384, 32768, 49152, 65536, 98304)
CHUNK_COLUMNS = [("case", "case", None), ("chunk", "chunk", None), ("ms", "ms", ".3f"),
                 ("GBps", "GB/s", ".0f"), ("pct_copy", "% copy", ".0f")]


def chunk_sweep_rows(min_time: float = 0.3) -> list[dict[str, Any]]:
    """The CUDA kernel's time per chunk target (``VITPLAST_CUDA_CHUNK``, read per call) next to the
    built-in policy, for the two bf16 singles and the ViT-H group, interleaved with the copy floor."""
    dev = torch.device("cuda")
    probe, probe_bytes, _ = floor_probe(dev)
    gen = torch.Generator(device=dev).manual_seed(0)
    cases = []
    for shape in SINGLE_SHAPES:
        x = torch.randn(shape, device=dev, generator=gen).to(torch.bfloat16)
        y = torch.randn(shape, device=dev, generator=gen).to(torch.bfloat16)
        cases.append(("x".join(map(str, shape)), tensor_bytes(x, y),
                      lambda x=x, y=y: vk.pair_sq_distances(x, y, backend="cuda")))
    xs, ys = vit_h_group(dev, gen, torch.bfloat16)
    cases.append(("vit-h group", tensor_bytes(*xs, *ys),
                  lambda: vk.pair_sq_distances_grouped(xs, ys, backend="cuda")))

    def with_chunk(chunk, fn):
        def run():
            if chunk == "policy":
                os.environ.pop("VITPLAST_CUDA_CHUNK", None)
            else:
                os.environ["VITPLAST_CUDA_CHUNK"] = str(chunk)
            return fn()
        return run

    out = []
    try:
        for case, nbytes, fn in cases:
            settings = ("policy",) + CHUNK_SWEEP
            fns = {str(c): with_chunk(c, fn) for c in settings} | {"floor": probe}
            times = time_interleaved(fns, device="cuda", min_time=min_time)
            copy_bps = probe_bytes / times["floor"].median
            for c in settings:
                t = times[str(c)].median
                out.append({"case": case, "chunk": str(c), "ms": t * 1e3, "GBps": nbytes / t / 1e9,
                            "pct_copy": 100 * nbytes / t / copy_bps})
    finally:
        os.environ.pop("VITPLAST_CUDA_CHUNK", None)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="bfloat16 singles only, shorter timing")
    p.add_argument("--json", metavar="PATH", help="write machine info and rows as JSON (atomic)")
    p.add_argument("--chunk-sweep", action="store_true",
                   help="only the CUDA kernel time per forced chunk size (VITPLAST_CUDA_CHUNK)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench.gpu_paired needs a CUDA device", file=sys.stderr)
        return 2
    info = machine_info("cuda")
    print(f"# {machine_line(info)}")
    t0 = time.perf_counter()
    if args.chunk_sweep:
        sweep = chunk_sweep_rows()
        print_table("cuda chunk sweep (bf16)", sweep, CHUNK_COLUMNS,
                    "chunk = elements per task forced for every call ('policy': built-in choice)")
        print(f"# {time.perf_counter() - t0:.0f} s")
        if args.json:
            write_json(args.json, {"machine": info, "rows": sweep})
        return 0
    table = rows(args.quick)
    print_table("gpu paired", table, COLUMNS, NOTE)
    try:
        from vitplast_kernels.backends import cuda as cuda_backend

        vk.pair_sq_distances(torch.ones(1, 1, device="cuda"), torch.ones(1, 1, device="cuda"))  # auto
        print(f"# auto on cuda: {cuda_backend.choose()}; autotune timings (ms, with VITPLAST_AUTOTUNE=1): "
              f"{cuda_backend.auto_timings()}")
    except ImportError:
        pass
    print(f"# {time.perf_counter() - t0:.0f} s")
    if args.json:
        write_json(args.json, {"machine": info, "rows": table, "note": NOTE})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
