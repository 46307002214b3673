"""Where an eager capture's time goes: ``python -m bench.eager_capture_profile``.

One process, interleaved rounds of a plain forward and a forward inside ``vk.capture`` (in_situ,
halves, no_grad) of a timm ViT with random weights. Per forward it reports the medians of:

- the wall time of each, and their per-round ratio;
- the time spent inside the capture's component hooks, split into the paired-op calls (``sq_sums``:
  the C++ kernel and its Python op layer) and the rest (bookkeeping: sharing, rows, the end-of-forward
  statistics);
- in a few extra forwards, each paired-op call repeated right after, on the now cache-hot tensors:
  what the calls cost when the data does not come from DRAM (the difference is the price of reading
  activations that the model's own kernels had already evicted, which no hook can avoid in eager
  mode);
- minor page faults per forward of each (see ``bench.harness.pin_allocator``; ``--allocator
  default`` shows glibc's default behaviour).

The timing wrappers add ~1 µs per hook; the repeated calls run only in the extra forwards.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

import vitplast_kernels as vk
from vitplast_kernels.measure import protocols

from .harness import (
    ALLOCATORS,
    machine_info,
    machine_line,
    minor_faults,
    read_bandwidth,
    set_allocator,
    tensor_bytes,
)


def timed_calls(fn, spent: dict[str, float], key: str, clock=time.perf_counter):
    """``fn`` wrapped so that each call's time (by ``clock``) is added to ``spent[key]``."""
    def timed(*args, **kwargs):
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += clock() - t0

    return timed


@contextlib.contextmanager
def timed_hooks(spent: dict[str, float], clock=time.perf_counter):
    """While open, every in-situ hook's time (by ``clock``) is added to ``spent["hooks"]``; the hook is
    restored after (the staticmethod itself, as it was)."""
    saved = protocols.InSitu.__dict__["_hook"]
    protocols.InSitu._hook = staticmethod(timed_calls(protocols.InSitu._hook, spent, "hooks", clock))
    try:
        yield
    finally:
        protocols.InSitu._hook = saved


def profile(model_name: str, batch: int, rounds: int) -> dict[str, float]:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(model_name, pretrained=False).eval()
    size = model.pretrained_cfg.get("input_size", (3, 224, 224))[-1]
    images = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    cap = vk.capture(model)
    spent = {"hooks": 0.0, "op": 0.0, "op_hot": 0.0, "bytes": 0.0, "calls": 0.0}
    pairing_sq_sums = cap.pairing.sq_sums

    repeat = [False]  # the hot repeats run in extra forwards of their own, not in the timed rounds

    def timed_sq_sums(tensors, **kw):
        t0 = time.perf_counter()
        out = pairing_sq_sums(tensors, **kw)
        spent["op"] += time.perf_counter() - t0
        if repeat[0]:  # counted in the extra forwards only: not inside the timed hooks
            spent["bytes"] += tensor_bytes(*tensors)
            spent["calls"] += 1
            t1 = time.perf_counter()
            pairing_sq_sums(tensors, **kw)
            spent["op_hot"] += time.perf_counter() - t1
        return out

    cap.pairing.sq_sums = timed_sq_sums
    rows: dict[str, list[float]] = {k: [] for k in ("plain", "capture", "ratio", "hooks", "op", "op_first",
                                                      "op_hot", "faults_plain", "faults_capture", "bytes",
                                                      "calls")}
    with timed_hooks(spent), torch.no_grad():
        model(images)
        with cap:
            model(images)
        for r in range(rounds):
            order = ("plain", "capture") if r % 2 == 0 else ("capture", "plain")
            t = {}
            for variant in order:
                for k in spent:
                    spent[k] = 0.0
                f0 = minor_faults()
                if variant == "capture":
                    cap.attach()
                t0 = time.perf_counter()
                model(images)
                t[variant] = time.perf_counter() - t0
                if variant == "capture":
                    cap.detach()
                    for k in ("hooks", "op"):
                        rows[k].append(spent[k])
                rows[f"faults_{variant}"].append(minor_faults() - f0)
            rows["plain"].append(t["plain"])
            rows["capture"].append(t["capture"])
            rows["ratio"].append(t["capture"] / t["plain"])
        repeat[0] = True
        with cap:
            for _ in range(min(rounds, 3)):
                for k in spent:
                    spent[k] = 0.0
                model(images)
                for k, kk in (("op_hot", "op_hot"), ("op_first", "op"), ("bytes", "bytes"),
                              ("calls", "calls")):
                    rows[k].append(spent[kk])
    return {k: statistics.median(v) for k, v in rows.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.eager_capture_profile",
                                description=__doc__.split("\n")[0])
    p.add_argument("--model", default="vit_small_patch16_224")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--allocator", choices=ALLOCATORS, default="pinned")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    alloc = set_allocator(args.allocator)
    print(f"# machine: {machine_line(machine_info('cpu'))}\n# {alloc}")
    m = profile(args.model, args.batch, args.rounds)
    ms = {k: 1e3 * v for k, v in m.items() if not k.startswith(("ratio", "faults", "bytes", "calls"))}
    bandwidth = read_bandwidth("cpu")
    print(f"{args.model} batch {args.batch}, medians of {args.rounds} interleaved rounds, per forward:")
    print(f"  plain forward        {ms['plain']:8.1f} ms   {m['faults_plain']:8.0f} minor faults")
    print(f"  forward + capture    {ms['capture']:8.1f} ms   {m['faults_capture']:8.0f} minor faults   "
          f"per-round ratio {m['ratio']:.3f}")
    print(f"  inside the hooks     {ms['hooks']:8.1f} ms")
    print(f"    paired-op calls    {ms['op']:8.1f} ms")
    print(f"    bookkeeping        {ms['hooks'] - ms['op']:8.1f} ms")
    print(f"  outside the hooks    {ms['capture'] - ms['plain'] - ms['hooks']:8.1f} ms   (hook dispatch, the "
          "model's kernels slowed by the reads: capture - plain - hooks)")
    print(f"  paired-op calls in separate forwards: {ms['op_first']:.1f} ms on the spot, "
          f"{ms['op_hot']:.1f} ms when each call is repeated at once (cache-hot)")
    floor = 1e3 * m["bytes"] / bandwidth
    print(f"  read floor: the {m['calls']:.0f} paired-op calls read {m['bytes'] / 1e6:.0f} MB per forward; "
          f"at the machine's read bandwidth ({bandwidth / 1e9:.1f} GB/s, bench.harness.read_bandwidth) that "
          f"alone is {floor:.1f} ms = {100 * floor / ms['plain']:.1f}% of the plain forward")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
