"""What one capture hook costs beyond its kernel work: ``python -m bench.hook_overhead``.

A tiny timm ViT (12 blocks, width 64, 4 images of 32x32: 60 component hooks whose tensors are a few KB,
so the paired kernels' own work is ~1 us per call) runs forwards alternately with the capture attached
but disabled (the hooks fire and return at once) and enabled. The difference per forward, divided by
the hooks, is the Python and dispatch cost of a hook's measurement: the part that dominates small
models and small batches, where the reductions themselves are negligible. Medians over ``--forwards``
alternations; ``--clock cpu`` times process CPU time (steadier on a shared machine, with one thread).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import vitplast_kernels as vk

from .harness import machine_info, machine_line


def per_hook_us(forwards: int, clock: str) -> dict[str, float]:
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_224", img_size=32, patch_size=16, depth=12, embed_dim=64,
                              num_heads=2, num_classes=10, pretrained=False).eval()
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    cap = vk.capture(model).attach()
    hooks = sum(len(names) for per_layer in cap.modules.values() for names in per_layer.values())
    now = time.process_time if clock == "cpu" else time.perf_counter
    off, on = [], []
    try:
        with torch.no_grad():
            for i in range(forwards + 50):  # the first 50 alternations warm up
                cap.enabled = False
                t0 = now()
                model(images)
                t1 = now()
                cap.enabled = True
                model(images)
                t2 = now()
                if i >= 50:
                    off.append(t1 - t0)
                    on.append(t2 - t1)
    finally:
        cap.detach()
    a, b = statistics.median(off), statistics.median(on)
    return {"hooks": hooks, "disabled_us": 1e6 * a, "enabled_us": 1e6 * b,
            "per_hook_us": 1e6 * (b - a) / hooks}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hook_overhead", description=__doc__.split("\n")[0])
    p.add_argument("--forwards", type=int, default=1000, help="alternations timed (after 50 warm-up)")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# machine: {machine_line(machine_info('cpu'))}; {torch.get_num_threads()} threads, "
          f"{args.clock} clock")
    r = per_hook_us(args.forwards, args.clock)
    print(f"tiny ViT (12 blocks, width 64, 4 images), {r['hooks']:.0f} hooks, medians of {args.forwards} "
          f"alternations: capture disabled {r['disabled_us']:.0f} us per forward, enabled "
          f"{r['enabled_us']:.0f} us: {r['per_hook_us']:.1f} us per hook")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
