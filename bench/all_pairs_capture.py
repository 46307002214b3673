"""Cost of ``pairs="all"`` vs ``pairs="halves"`` in a whole measurement.

One measurement = forward of a timm ViT-Small (random weights) on a batch of N images inside
``capture(..., protocol="in_situ")`` + ``pairwise_plasticity`` + reading the means on the host.
Timed in interleaved rounds (medians) beside the plain forward. Target on CPU: ``all / halves <= 1.5``.

``rows(device, quick)`` -> list of dicts; ``python -m bench.all_pairs_capture [--device cpu|cuda]
[--batch N ...] [--quick]`` prints the table.
"""

from __future__ import annotations

import argparse

import torch

import vitplast_kernels as vk

from .harness import print_table, time_interleaved

COLUMNS = [
    ("model", "model", None),
    ("batch", "N", None),
    ("pairs_all", "pairs (all)", None),
    ("forward_ms", "forward ms", ".1f"),
    ("halves_ms", "halves ms", ".1f"),
    ("all_ms", "all ms", ".1f"),
    ("x_all_vs_halves", "all / halves", ".2f"),
    ("all_overhead_pct", "all +% fwd", ".1f"),
]


def _measure(model, images, pairs: str) -> float:
    with vk.capture(model, pairs=pairs) as acts, torch.no_grad():
        model(images)
    res = vk.pairwise_plasticity(acts)
    return float(res.mean("MHA").sum())  # host read: the whole measurement has happened


def rows(device: str = "cpu", quick: bool = False, batches: list[int] | None = None) -> list[dict]:
    import timm

    dev = torch.device(device)
    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_224", pretrained=False).eval().to(dev)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = model.to(dtype)
    batches = batches or ([8] if quick else [8, 16]) if dev.type == "cpu" else [64, 256]
    out = []
    for n in batches:
        images = torch.randn(n, 3, 224, 224, device=dev, dtype=dtype)

        def forward(images=images):
            with torch.no_grad():
                model(images)

        t = time_interleaved(
            {"forward": forward, "halves": lambda images=images: _measure(model, images, "halves"),
             "all": lambda images=images: _measure(model, images, "all")},
            device=dev, min_rounds=3 if quick else 5, min_time=1.0,
        )
        f, h, a = (t[k].median for k in ("forward", "halves", "all"))
        out.append({"model": "vit_small", "batch": n, "pairs_all": n * (n - 1) // 2,
                    "forward_ms": f * 1e3, "halves_ms": h * 1e3, "all_ms": a * 1e3,
                    "x_all_vs_halves": a / h, "all_overhead_pct": 100 * (a - f) / f})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, nargs="*")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    print_table(f"pairs='all' vs 'halves' in a ViT-Small measurement on {args.device}",
                rows(args.device, args.quick, args.batch), COLUMNS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
