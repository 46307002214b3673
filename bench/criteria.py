"""What each criterion costs: time and peak memory on ViT-B/16 (random init, 64 images), beside one
training step.

The training step is full finetuning of the same model on a batch of ``--batch-size`` images: forward,
cross-entropy, backward, AdamW step (its state included). Each criterion scores every unit on the same
images (``--images`` of them, in batches of ``--batch-size``; plasticity pairs each batch's halves).
Peak memory is the device's (``torch.cuda.max_memory_allocated``), so it is reported on CUDA only;
on the CPU the table shows times and passes. Target: no criterion above 2x the training step's peak.

``rows(...)`` -> list of dicts; ``python -m bench.criteria [--device cpu|cuda] [--model NAME]
[--images N] [--batch-size B] [--criteria a,b]`` prints the table. Not run in CI (a smoke test runs
``rows`` on a tiny model).
"""

from __future__ import annotations

import argparse
import time

import torch

from .harness import print_table

COLUMNS = [
    ("criterion", "criterion", None),
    ("seconds", "seconds", ".2f"),
    ("forwards", "forwards", None),
    ("backwards", "backwards", None),
    ("peak_mib", "peak MiB", ".0f"),
    ("x_train_step", "x train step", ".2f"),
]


def _model(name: str, device: torch.device, **kwargs) -> torch.nn.Module:
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, num_classes=10, **kwargs).to(device)


def train_step_peak(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor
                    ) -> tuple[float, int | None]:
    """``(seconds, peak bytes)`` of one full-finetuning AdamW step on ``images`` (peak: CUDA only)."""
    cuda = images.device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    peak = int(torch.cuda.max_memory_allocated()) if cuda else None
    del opt
    model.eval()
    return seconds, peak


def rows(device: str = "cpu", model_name: str = "vit_base_patch16_224", images: int = 64,
         batch_size: int = 32, criteria: list[str] | None = None, img_size: int = 224,
         **model_kwargs) -> list[dict]:
    from vitplast.criteria import CRITERIA, Batch, Setting, get_criterion

    dev = torch.device(device)
    names = criteria or list(CRITERIA)
    g = torch.Generator().manual_seed(0)
    data = [Batch(torch.randn(min(batch_size, images - k), 3, img_size, img_size, generator=g).to(dev),
                  torch.randint(0, 10, (min(batch_size, images - k),), generator=g).to(dev))
            for k in range(0, images, batch_size)]
    model = _model(model_name, dev, img_size=img_size, **model_kwargs)
    step_s, step_peak = train_step_peak(model, data[0].images, data[0].labels)
    out = [{"criterion": "train step (AdamW, full)", "seconds": step_s, "forwards": 1, "backwards": 1,
            "peak_mib": None if step_peak is None else step_peak / 2**20, "x_train_step": 1.0}]
    for name in names:
        model = _model(model_name, dev, img_size=img_size, **model_kwargs).eval()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        setting = Setting(lambda seed, m=model: m, seeds=(0,), batches=data,
                          pair_batches=lambda: [b.images for b in data], device=dev)
        cost = get_criterion(name).score(setting).cost
        peak = cost.peak_memory
        out.append({"criterion": name, "seconds": cost.seconds, "forwards": cost.forwards,
                    "backwards": cost.backwards, "peak_mib": None if peak is None else peak / 2**20,
                    "x_train_step": None if peak is None or not step_peak else peak / step_peak})
        del model, setting
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--criteria", default=None, help="comma-separated (default: every criterion)")
    args = p.parse_args(argv)
    crit = [c.strip() for c in args.criteria.split(",")] if args.criteria else None
    print_table(f"criteria on {args.model} (random init), {args.images} images, on {args.device}",
                rows(args.device, args.model, args.images, args.batch_size, crit), COLUMNS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
