"""A/B of the paired CPU kernel's task scheduling, in one process and the same interleaved rounds.

Needs `_C` built with static_switch.patch applied (VP_SCHED=s: the even static split of
at::parallel_for; unset: guided chunks, csrc/cpu/guided_tasks.h), run from the repository root:
    python bench/measured/cpu-2026-12-03-guided/sched_ab.py [ROUNDS]
Prints per shape and dtype: median ms, the median over rounds of compile's time / ours, and % of the read
floor (amax over 256 MiB, timed in the same rounds), per round then the median.
"""

import os
import statistics
import sys

import torch

import vitplast_kernels as vk
from bench.harness import floor_probe, set_allocator
from vitplast_kernels import timing

SHAPES = ((16, 197, 768), (64, 257, 1280), (32, 257, 5120))


def eager(x, y):
    return ((x - y) ** 2).flatten(1).sum(-1).sqrt()


def ours(mode, x, y):
    def call():
        os.environ["VP_SCHED"] = mode
        return vk.pair_sq_distances(x, y)
    return call


def main(rounds: int) -> None:
    print(f"# {set_allocator('pinned')}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"load {os.getloadavg()[0]:.2f}; {rounds} rounds")
    probe, probe_bytes, _ = floor_probe("cpu")
    compiled = torch.compile(eager, dynamic=False)
    gen = torch.Generator().manual_seed(0)
    for shape in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(shape, generator=gen).to(dtype)
            y = torch.randn(shape, generator=gen).to(dtype)
            compiled(x, y)
            assert torch.equal(ours("s", x, y)(), ours("g", x, y)())  # same bits either way
            nbytes = 2 * x.numel() * x.element_size()
            fns = {"static": ours("s", x, y), "guided": ours("g", x, y),
                   "compile": lambda x=x, y=y: compiled(x, y), "floor": probe}
            s = timing.interleaved_samples(fns, device=torch.device("cpu"), rounds=rounds, warmup=2)
            cells = []
            for name in ("static", "guided", "compile"):
                x_compile = statistics.median(c / o for c, o in zip(s["compile"], s[name], strict=True))
                pct = statistics.median(100 * nbytes / o * f / probe_bytes
                                        for o, f in zip(s[name], s["floor"], strict=True))
                cells.append(f"{name} {statistics.median(s[name]):.2f} ms x compile {x_compile:.3f} "
                             f"% floor {pct:.0f}")
            print(f"{'x'.join(map(str, shape))} {str(dtype)[6:]}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
