"""Monitoring a training step, compiled and eager: ``python -m bench.compile_monitor [--device cpu|cuda]``.

Per model (``--models``, default ViT-S/16 and ViT-B/16 at img 64): a timm model's training step
(forward, backward, SGD step) timed in interleaved rounds: plain compiled, compiled and monitored every
step, a cycle of ``--every`` steps monitored on the first against the same cycle unmonitored, and the
eager step plain and monitored (the ratio of users without ``torch.compile``). The cycle ratio for
``--every-derived`` k (default 100) is derived from the measured cycle: its extra time per cycle over k
plain steps. With ``--reduction both`` the monitor's square sums go through the custom op (the kernel
backend named) and a second instance of the model is compiled with them handed to Inductor
(``ops.paired.COMPILED_REDUCTION = "inductor"``, backend ``"auto"``); its monitored step is timed in
the same rounds. Also ``torch._dynamo.explain``'s graph and break
counts with a monitor attached, and the compilations after warm-up while the monitor toggles (each
variant compiled once: expected 0). The plain step is timed twice per round (the noise row: what the
same step measures against itself), every ratio is given as a ratio of medians and as the median of the
per-round ratios; ``--settle N`` runs each variant N times untimed before each of its samples (so that
none is the first call after another variant; on the 2-core VM it did not narrow the noise row).
``--forward-only`` times the compiled no_grad forward with every component monitored instead (the
ViT-Huge/14 configuration of the GPU check). Prints one table per model; ``--json PATH`` writes them
with the machine and versions.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import vitplast_kernels as vk
from vitplast_kernels.ops import paired

from .harness import (
    Timing,
    machine_info,
    machine_line,
    per_round_ratio,
    print_table,
    time_interleaved,
    write_json,
)

SHORT = {"vit_small_patch16_224": "ViT-S/16", "vit_base_patch16_224": "ViT-B/16"}


def _model(name: str, img: int, device: torch.device, dtype: torch.dtype):
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, img_size=img, num_classes=10, pretrained=False).to(device, dtype)


def cpu_time_interleaved(fns: dict, rounds: int, min_time: float, settle: int = 0) -> dict[str, Timing]:
    """Like ``time_interleaved`` (rounds, order rotated) but each sample is the process's CPU time
    (``time.process_time``): with one thread, the work done, whatever share of the CPUs other jobs
    take (a loaded machine stretches wall time, not this). Timing's q10/q90 hold min/max here."""
    names, times, spent, done = list(fns), {n: [] for n in fns}, 0.0, 0
    for n in names:
        fns[n]()
    while done < rounds or spent < min_time:
        for n in names[done % len(names):] + names[: done % len(names)]:
            for _ in range(settle):
                fns[n]()
            t0 = time.process_time()
            fns[n]()
            times[n].append(time.process_time() - t0)
            spent += times[n][-1]
        done += 1
    return {n: Timing(statistics.median(v), min(v), max(v), len(v), tuple(v)) for n, v in times.items()}


def _compile_count() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _setup(a, name: str, device: torch.device, dtype: torch.dtype, x, y, backend: str):
    """A model, its monitor (square sums through ``backend``), its compiled step and eager step."""
    model = _model(name, a.img_size, device, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    mon = vk.monitor(model, every=a.every, backend=backend)  # before compiling: the hooks are in the graph
    compiled = torch.compile(model, mode=a.mode)

    def make(fwd):
        if a.forward_only:
            def step():
                with torch.no_grad():
                    return fwd(x)
        else:
            def step():
                loss = F.cross_entropy(fwd(x).float(), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        return step

    for on in (False, True, False, True):  # compile both variants, then settle
        with mon.measuring(on):
            make(compiled)()
    return mon, make(compiled), make(model)


def bench_model(a, name: str, device: torch.device, dtype: torch.dtype) -> dict:
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(a.batch_size, 3, a.img_size, a.img_size, generator=gen).to(device, dtype)
    y = torch.randint(0, 10, (a.batch_size,), generator=gen).to(device)
    explain_model = _model(name, a.img_size, device, dtype)
    probe = vk.monitor(explain_model)
    explained = torch._dynamo.explain(explain_model)(x)
    probe.detach()
    torch._dynamo.reset()
    # both: the first instance names the kernel backend (never handed to Inductor, the switch is not
    # read), the second uses "auto" with the switch set for the whole run (Dynamo guards on it)
    kernel = "cpu" if device.type == "cpu" else "cuda"
    if a.reduction == "both":
        paired.COMPILED_REDUCTION = "inductor"
    mon, step, eager_step = _setup(a, name, device, dtype, x, y, kernel if a.reduction == "both" else "auto")
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

    def eager_plain():
        with mon.measuring(False):
            eager_step()

    def eager_monitored():
        with mon.measuring(True):
            eager_step()

    # "plain_again" is the plain step once more in every round: its ratio to "plain" is the noise floor
    fns = {"plain": plain, "plain_again": plain, "monitored": monitored, "every_k": every_k,
           "plain_k": plain_k}
    if a.reduction == "both":
        mon2, step2, _ = _setup(a, name, device, dtype, x, y, "auto")

        def monitored_inductor():
            with mon2.measuring(True):
                step2()
        fns["monitored_inductor"] = monitored_inductor
    if not a.no_eager:
        fns.update(eager_plain=eager_plain, eager_monitored=eager_monitored)
    warm = _compile_count()
    if a.clock == "cpu":
        times = cpu_time_interleaved(fns, a.rounds, a.min_time, a.settle)
    else:
        times = time_interleaved(fns, device=device, min_time=a.min_time, min_rounds=a.rounds,
                                 settle=a.settle)
    recompiles = _compile_count() - warm
    med = {k: v.median for k, v in times.items()}

    def per_round(num: str, den: str) -> float:
        return per_round_ratio(times[num].times, times[den].times)
    base, plain_step_k = med["plain"], med["plain_k"] / a.every
    extra_cycle = med["every_k"] - med["plain_k"]  # what monitoring one step of the cycle adds
    choice = "kernel" if a.reduction == "both" else (paired.COMPILED_REDUCTION or "inductor")
    which = "inductor" if choice == "inductor" else "custom op"
    rows = [
        {"variant": "compiled step", "ms": base * 1e3, "ratio": 1.0, "round": 1.0},
        {"variant": "compiled step again (noise)", "ms": med["plain_again"] * 1e3,
         "ratio": med["plain_again"] / base, "round": per_round("plain_again", "plain")},
        {"variant": f"monitored every step ({which} sums)", "ms": med["monitored"] * 1e3,
         "ratio": med["monitored"] / base, "round": per_round("monitored", "plain")},
    ]
    if "monitored_inductor" in med:
        rows.append({"variant": "monitored every step (inductor sums)", "ms": med["monitored_inductor"] * 1e3,
                     "ratio": med["monitored_inductor"] / base,
                     "round": per_round("monitored_inductor", "plain")})
    cycle_round = per_round("every_k", "plain_k")
    rows += [
        {"variant": f"{a.every} plain steps (avg)", "ms": plain_step_k * 1e3, "ratio": 1.0, "round": 1.0},
        {"variant": f"monitored every {a.every}th (avg)", "ms": med["every_k"] / a.every * 1e3,
         "ratio": med["every_k"] / med["plain_k"], "round": cycle_round},
        {"variant": f"monitored every {a.every_derived}th (avg, derived)",
         "ms": (plain_step_k + extra_cycle / a.every_derived) * 1e3,
         "ratio": 1 + extra_cycle / (a.every_derived * plain_step_k),
         "round": 1 + (cycle_round - 1) * a.every / a.every_derived},
    ]
    if "eager_plain" in med:
        rows += [{"variant": "eager step", "ms": med["eager_plain"] * 1e3, "ratio": 1.0, "round": 1.0},
                 {"variant": "eager monitored every step", "ms": med["eager_monitored"] * 1e3,
                  "ratio": med["eager_monitored"] / med["eager_plain"],
                  "round": per_round("eager_monitored", "eager_plain")}]
    what = "compiled no_grad forward" if a.forward_only else "compiled training step"
    print_table(f"{SHORT.get(name, name)} ({name}) img {a.img_size} batch {a.batch_size} {a.dtype} on "
                f"{a.device}: {what}; ratios against the line above each group",
                rows, [("variant", "variant", None), ("ms", "ms (median)", ".2f"),
                       ("ratio", "x plain", ".3f"), ("round", "x plain (per round)", ".3f")])
    res = mon.result()
    print(f"graphs {explained.graph_count}, graph breaks {explained.graph_break_count} (monitor attached); "
          f"compilations after warm-up while toggling: {recompiles}; "
          f"components {len(res.components)} x {len(res.layers)}; rounds {times['plain'].reps}")
    return {"model": name, "rows": rows, "graph_count": explained.graph_count,
            "graph_breaks": explained.graph_break_count, "recompiles_after_warmup": recompiles,
            "timings": {k: v.to_dict() for k, v in times.items()}}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", default="vit_small_patch16_224,vit_base_patch16_224",
                   help="comma-separated timm model names")
    p.add_argument("--model", default=None, help="one model (overrides --models)")
    p.add_argument("--img-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16, help="images per batch (even: halves pairing)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--every", type=int, default=10, help="the measured cycle: monitored every k-th step")
    p.add_argument("--every-derived", type=int, default=100, help="a longer cycle, derived from --every's")
    p.add_argument("--reduction", default="default", choices=("default", "both"),
                   help="both: also time the monitored step with the square sums handed to Inductor")
    p.add_argument("--no-eager", action="store_true", help="skip the eager steps")
    p.add_argument("--mode", default=None, help="torch.compile mode (e.g. reduce-overhead on CUDA)")
    p.add_argument("--forward-only", action="store_true",
                   help="time the compiled no_grad forward instead of a training step")
    p.add_argument("--min-time", type=float, default=3.0, help="seconds of timing, all variants together")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds at least")
    p.add_argument("--settle", type=int, default=0,
                   help="untimed calls of a variant right before each of its samples")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                   help="cpu: process CPU time per sample (with --threads 1: steady on a loaded machine)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.clock == "cpu" and a.device != "cpu":
        p.error("--clock cpu times CPU work: --device cpu only")
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    info = machine_info(device)
    print(machine_line(info) + f"; {torch.get_num_threads()} threads, {a.clock} clock")
    names = [a.model] if a.model else [n for n in a.models.split(",") if n]
    out = {"machine": info, "args": vars(a), "models": [bench_model(a, n, device, dtype) for n in names]}
    if a.json:
        write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
