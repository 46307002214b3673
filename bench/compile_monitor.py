"""Monitoring a compiled training step: ``python -m bench.compile_monitor [--device cpu|cuda]``.

A timm model's training step (forward under ``torch.compile``, backward, SGD step) timed in interleaved
rounds: plain compiled, monitored every step, and monitored every ``--every``-th step (the average over
a cycle of steps); plus ``torch._dynamo.explain``'s graph and break counts with a monitor attached, and
the compilations that happen after warm-up while the monitor toggles (each variant compiled once:
expected 0). ``--forward-only`` times the compiled no_grad forward with every component monitored
instead (the ViT-Huge/14 configuration of the GPU check). Prints one table; ``--json PATH`` writes it
with the machine and versions.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import vitplast_kernels as vk

from .harness import machine_info, machine_line, print_table, time_interleaved, write_json


def _model(name: str, img: int, device: torch.device, dtype: torch.dtype):
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, img_size=img, num_classes=10, pretrained=False).to(device, dtype)


def _compile_count() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="vit_small_patch16_224")
    p.add_argument("--img-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16, help="images per batch (even: halves pairing)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--mode", default=None, help="torch.compile mode (e.g. reduce-overhead on CUDA)")
    p.add_argument("--forward-only", action="store_true",
                   help="time the compiled no_grad forward instead of a training step")
    p.add_argument("--min-time", type=float, default=3.0, help="seconds of timing per variant")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    info = machine_info(device)
    print(machine_line(info))
    model = _model(a.model, a.img_size, device, dtype)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(a.batch_size, 3, a.img_size, a.img_size, generator=gen).to(device, dtype)
    y = torch.randint(0, 10, (a.batch_size,), generator=gen).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    mon = vk.monitor(model, every=a.every)  # attached before compiling: the hooks are in the graph
    with mon.measuring(True):
        explained = torch._dynamo.explain(model)(x)
    torch._dynamo.reset()
    compiled = torch.compile(model, mode=a.mode)

    if a.forward_only:
        def step():
            with torch.no_grad():
                return compiled(x)
    else:
        def step():
            loss = F.cross_entropy(compiled(x).float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    def plain():
        with mon.measuring(False):
            step()

    def monitored():
        with mon.measuring(True):
            step()

    def every_k():  # one cycle of `every` steps, the first measured
        for _ in range(a.every):
            step()
            mon.step()

    def plain_k():  # the same cycle unmonitored: samples of the same length as every_k's
        with mon.measuring(False):
            for _ in range(a.every):
                step()

    for fn in (plain, monitored, plain, monitored):  # compile both variants, then settle
        fn()
    warm = _compile_count()
    times = time_interleaved({"plain": plain, "monitored": monitored, "every_k": every_k, "plain_k": plain_k},
                             device=device, min_time=a.min_time, min_rounds=5)
    recompiles = _compile_count() - warm
    base = times["plain"].median
    per_step_k = times["every_k"].median / a.every
    plain_step_k = times["plain_k"].median / a.every
    rows = [
        {"variant": "compiled step", "ms": base * 1e3, "ratio": 1.0},
        {"variant": "monitored every step", "ms": times["monitored"].median * 1e3,
         "ratio": times["monitored"].median / base},
        {"variant": f"{a.every} plain steps (avg)", "ms": plain_step_k * 1e3, "ratio": 1.0},
        {"variant": f"monitored every {a.every}th (avg)", "ms": per_step_k * 1e3,
         "ratio": per_step_k / plain_step_k},
    ]
    what = "compiled no_grad forward" if a.forward_only else "compiled training step"
    print_table(f"{a.model} img {a.img_size} batch {a.batch_size} {a.dtype} on {a.device}: {what}",
                rows, [("variant", "variant", None), ("ms", "ms (median)", ".2f"),
                       ("ratio", "x plain", ".3f")])
    res = mon.result()
    print(f"graphs {explained.graph_count}, graph breaks {explained.graph_break_count} (monitor attached); "
          f"compilations after warm-up while toggling: {recompiles}; "
          f"measured forwards {mon.capture.n_forwards}, components {len(res.components)} x {len(res.layers)}")
    out = {"machine": info, "args": vars(a), "rows": rows, "graph_count": explained.graph_count,
           "graph_breaks": explained.graph_break_count, "recompiles_after_warmup": recompiles,
           "timings": {k: v.to_dict() for k, v in times.items()}}
    if a.json:
        write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
