"""Cost of measuring plasticity during a forward: ``python -m bench.capture_overhead``.

1. Time: the plain no_grad forward of ``--model`` (default ``vit_small_patch16_224``, batch 16, CPU)
   vs the same forward inside ``capture(protocol="in_situ", pairs="halves")`` (result built, which
   synchronises once), interleaved rounds, medians. Target: overhead <= 15%.
2. Peak memory: bytes of live tensor storage at every op boundary (a dispatch mode watching every
   allocation and its release), plain forward vs in_situ capture vs decomposition, and decomposition
   at several depths: its extra peak must not grow with depth. Target: in_situ extra <= 5%.
3. What the paper's protocol (every component output of every block copied to the host) would store
   for ViT-Huge/14 at batch 128, and what capture keeps (formulas, printed).

Prints tables; ``--json PATH`` writes the numbers with the machine and versions.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import vitplast_kernels as vk

from .harness import machine_info, machine_line, print_table, time_interleaved, write_json


class PeakTensorMemory(TorchDispatchMode):
    """Peak bytes of live tensor storages created inside the mode (checked after every op); storages in
    ``exclude`` (data pointers of the weights and the input: views of them are op outputs too) skipped."""

    def __init__(self, exclude: set[int] = frozenset()) -> None:
        super().__init__()
        self.exclude = exclude
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(key)[1]
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                st = t.untyped_storage()
                key = st.data_ptr()
                if key and key not in self.live and key not in self.exclude:
                    self.live[key] = (StorageWeakRef(st), st.nbytes())
                    self.current += st.nbytes()
        self.peak = max(self.peak, self.current)
        return out


def peak_bytes(fn, model, x) -> int:
    """Peak bytes of the activations (and capture state) of one call of ``fn``, weights and input excluded."""
    exclude = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    with PeakTensorMemory(exclude) as m:
        fn()
    return m.peak


def make_model(name: str, depth: int | None = None):
    import timm

    kw = {} if depth is None else {"depth": depth}
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, **kw).eval()


def forward_fn(model, x, protocol: str | None):
    def run():
        with torch.no_grad():
            if protocol is None:
                return model(x)
            with vk.capture(model, protocol=protocol) as acts:
                model(x)
            return vk.pairwise_plasticity(acts).mean("MHA")  # asks for a value: one sync

    return run


def cpu_times(fns, rounds: int) -> dict[str, float]:
    """Median process CPU seconds per call (all threads), interleaved rounds."""
    import statistics
    import time

    out: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            t = time.process_time()
            fns[k]()
            out[k].append(time.process_time() - t)
    return {k: statistics.median(v) for k, v in out.items()}


def paper_vs_ours(depth=32, d=1280, n=257, batch=128, mlp_ratio=4) -> list[dict]:
    """Bytes per measurement of ViT-Huge/14 (224 px: 256 patches + class token) at ``batch``."""
    act = batch * n * d * 4  # one float32 (batch, n, d) activation
    per_block = act * (4 + mlp_ratio)  # LN1, MHA, LN2, FC2 outputs (d) + FC1 output (4d)
    stored_paper = act + depth * per_block  # e and every output, kept on the host
    ours_kept = 5 * depth * 5 * 8  # (component, layer) x [count, sum, sumsq, identical, nonfinite] f64
    ours_transient_decomp = act + act * mlp_ratio  # e kept during the forward + the widest output
    return [
        {"what": "paper protocol: all outputs copied to host", "bytes": stored_paper},
        {"what": "capture, kept after the forward (sums)", "bytes": ours_kept},
        {"what": "capture decomposition, extra peak (bound: e + widest output)",
         "bytes": ours_transient_decomp},
        {"what": "capture in_situ, extra peak during the forward (per-pair sums)",
         "bytes": 8 * depth * (batch // 2) * 4},
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_small_patch16_224")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--depths", default="2,4,8", help="depths for the decomposition memory check")
    ap.add_argument("--skip-time", action="store_true", help="memory tables only")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="also time with the process CPU clock (less sensitive to other processes on a "
                    "shared machine than wall time)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    info = machine_info("cpu")
    print(machine_line(info))
    model = make_model(args.model)
    x = torch.randn(args.batch, 3, 224, 224, generator=torch.Generator().manual_seed(0))

    fns = {"plain": forward_fn(model, x, None), "in_situ": forward_fn(model, x, "in_situ"),
           "decomposition": forward_fn(model, x, "decomposition")}
    t = {} if args.skip_time else time_interleaved(fns, device="cpu", warmup=1, min_rounds=args.min_rounds,
                                                   min_time=1.0)
    base = t["plain"].median if t else 1.0
    rows = [{"run": k, "median_s": v.median, "q10_s": v.q10, "q90_s": v.q90, "rounds": v.reps,
             "vs_plain": v.median / base} for k, v in t.items()]
    if args.cpu_clock and not args.skip_time:
        cpu = cpu_times(fns, rounds=args.min_rounds)
        for r in rows:
            r["cpu_s"] = cpu[r["run"]]
            r["cpu_vs_plain"] = cpu[r["run"]] / cpu["plain"]
    print_table(f"time: {args.model}, batch {args.batch}, no_grad, CPU (interleaved rounds, medians)", rows,
                [("run", "run", None), ("median_s", "median s", ".3f"), ("q10_s", "q10", ".3f"),
                 ("q90_s", "q90", ".3f"), ("rounds", "rounds", "d"), ("vs_plain", "vs plain", ".3f"),
                 ("cpu_s", "CPU-clock s", ".3f"), ("cpu_vs_plain", "CPU-clock vs plain", ".3f")])

    mem = {k: peak_bytes(fn, model, x) for k, fn in fns.items()}
    mrows = [{"run": k, "peak_MiB": v / 2**20, "extra_pct": 100 * (v / mem["plain"] - 1)}
             for k, v in mem.items()]
    print_table("peak live activation memory (every op boundary; weights and input excluded)", mrows,
                [("run", "run", None), ("peak_MiB", "peak MiB", ".1f"), ("extra_pct", "extra %", "+.2f")])

    drows = []
    for depth in [int(s) for s in args.depths.split(",") if s]:
        m = make_model(args.model, depth)
        xs = x[:4].clone()
        p = peak_bytes(forward_fn(m, xs, None), m, xs)
        dcp = peak_bytes(forward_fn(m, xs, "decomposition"), m, xs)
        ins = peak_bytes(forward_fn(m, xs, "in_situ"), m, xs)
        drows.append({"depth": depth, "plain_MiB": p / 2**20, "decomp_extra_MiB": (dcp - p) / 2**20,
                      "in_situ_extra_MiB": (ins - p) / 2**20})
    print_table("extra peak memory vs depth (batch 4)", drows,
                [("depth", "depth", "d"), ("plain_MiB", "plain MiB", ".1f"),
                 ("decomp_extra_MiB", "decomposition extra MiB", ".2f"),
                 ("in_situ_extra_MiB", "in_situ extra MiB", ".3f")])

    hrows = paper_vs_ours()
    for r in hrows:
        r["GiB"] = r["bytes"] / 2**30
    print_table("ViT-Huge/14, batch 128, 32 blocks, float32 (formulas)", hrows,
                [("what", "what", None), ("bytes", "bytes", "d"), ("GiB", "GiB", ".6f")])
    if args.json:
        write_json(args.json, {"machine": info, "time": rows, "memory": mrows, "depth": drows, "huge": hrows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
