"""The paired op's read rate against the distance between its two inputs in memory.

``a`` and ``b`` (``B x n x d``, default the 64x257x1280 case of ``bench.paired``) are carved out of one
buffer, ``b`` starting ``offset`` bytes after ``a``, for offsets that are and are not multiples of 2^28
bytes. On Zen 4 the L1 data cache tells its ways apart by a hash of linear-address bits 12-27, so with
``b - a`` a multiple of 2^28 the line of ``a`` and the line of ``b`` read together evict each other
(``csrc/cpu/span_sq_sum_avx512.cpp``, ``streams_alias``: such ``b`` is read through a copy on the stack).
The allocator can place two tensors so (``bench.compare``'s own 64x257x1280 float32 pair, in some runs:
bench/measured/cpu-2026-12-04-aliasing/NOTES.md), and the halves of a batch whose half is a power of two
bytes sit so.

Every offset's call and the read floor (``harness.floor_probe``) are timed in the same interleaved
rounds; ``% floor`` is the median over rounds of the call's rate / the floor's rate in that round.

    python -m bench.paired_offsets [--dtype float32|bfloat16|float16] [--shape 64x257x1280] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

import vitplast_kernels as vk

from .harness import (
    floor_probe,
    machine_info,
    machine_line,
    per_round_ratio,
    print_table,
    set_allocator,
    time_interleaved,
    write_json,
)

OFFSETS = {  # name -> bytes from a's start to b's start (each at least the size of a)
    "2^28": 2**28, "2^29": 2**29, "2^28 + 64 B": 2**28 + 64, "2^28 + 4 KiB": 2**28 + 4096,
    "2^28 + 1 MiB": 2**28 + 2**20, "2^27 + 2^26": 2**27 + 2**26, "3 * 2^27": 3 * 2**27,
    "a's size + 4 KiB": None,  # where two allocations in a row put them (mmap, one page of header)
}
COLUMNS = [
    ("offset", "b - a", None),
    ("aliased", "within 128 B of k * 2^28", None),
    ("ms", "ms", ".2f"),
    ("GBps", "GB/s", ".1f"),
    ("floor_GBps", "floor GB/s", ".1f"),
    ("pct_floor", "% floor", ".0f"),
    ("same_bits", "bits = copies'", None),
]


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) < 2 or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"--shape {text!r}: expected B x n x ... positive sizes, e.g. 64x257x1280")
    return shape


def rows(shape: tuple[int, ...], dtype: torch.dtype, min_time: float = 3.0) -> list[dict[str, Any]]:
    """One row per offset in `OFFSETS` (those that leave room for ``a``), timed in the same rounds."""
    numel = 1
    for s in shape:
        numel *= s
    item = torch.empty((), dtype=dtype).element_size()
    nbytes = numel * item
    offsets = {k: (nbytes + 4096 if v is None else v) for k, v in OFFSETS.items()}
    offsets = {k: v for k, v in offsets.items() if v >= nbytes and v % item == 0}
    pool = torch.empty(max(offsets.values()) // item + numel, dtype=dtype)
    gen = torch.Generator().manual_seed(0)
    a = pool[:numel].view(shape)
    a.copy_(torch.randn(shape, generator=gen))
    pairs = {}
    for name, off in offsets.items():
        b = pool[off // item: off // item + numel].view(shape)
        b.copy_(torch.randn(shape, generator=gen))
        pairs[name] = (a, b)
    probe, probe_bytes, _ = floor_probe("cpu")
    fns = {name: (lambda a=a, b=b: vk.pair_sq_distances(a, b)) for name, (a, b) in pairs.items()}
    times = time_interleaved({**fns, "floor": probe}, min_time=min_time, min_rounds=9, settle=1)
    out = []
    for name, (a, b) in pairs.items():
        t = times[name]
        same = torch.equal(vk.pair_sq_distances(a, b), vk.pair_sq_distances(a.clone(), b.clone()))
        floor_bps = probe_bytes / times["floor"].median
        pct = 100 * 2 * nbytes / probe_bytes * per_round_ratio(times["floor"].times, t.times)
        rest = offsets[name] % 2**28
        out.append({"offset": name, "aliased": min(rest, 2**28 - rest) < 128, "ms": t.median * 1e3,
                    "GBps": 2 * nbytes / t.median / 1e9, "floor_GBps": floor_bps / 1e9, "pct_floor": pct,
                    "same_bits": same})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", type=parse_shape, default=(64, 257, 1280),
                   help="B x n x d (default 64x257x1280)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--min-time", type=float, default=3.0, help="seconds of rounds at least (default 3)")
    p.add_argument("--json", metavar="PATH", help="write the machine line and the rows as JSON (atomic)")
    args = p.parse_args(argv)
    info = machine_info("cpu")
    info["allocator"] = set_allocator("pinned")
    dtype = getattr(torch, args.dtype)
    print(f"# python -m bench.paired_offsets --shape {'x'.join(map(str, args.shape))} --dtype {args.dtype}")
    print(f"# machine: {machine_line(info)}")
    out = rows(args.shape, dtype, args.min_time)
    print_table("paired op against the distance of b from a in memory", out, COLUMNS,
                "a and b carved out of one buffer; % floor = median over interleaved rounds of the call's "
                "rate / the amax read floor's; bits = copies': the same bits as on copies of a and b")
    if args.json:
        record = {"machine": info, "shape": args.shape, "dtype": args.dtype, "rows": out}
        print(f"# wrote {write_json(args.json, record)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
