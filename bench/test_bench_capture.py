"""pytest-benchmark suite of the measurement API on a small timm ViT: ``pytest bench/ --benchmark-only``.

``capture`` + ``pairwise_plasticity`` (in_situ and decomposition protocols, halves and all pairs)
around a forward, ``pairwise_plasticity`` on plain tensors, and the plain forward as the baseline
(the ratio is the measurement's cost). Random weights; ViT-Tiny at 224 px, 8 images.
"""

from __future__ import annotations

import pytest
import torch

import vitplast_kernels as vk

timm = pytest.importorskip("timm")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval().to(DEVICE)
    images = torch.randn(8, 3, 224, 224, device=DEVICE)
    return model, images


def _sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def test_forward(benchmark, vit):
    model, images = vit

    def run():
        with torch.no_grad():
            model(images)
        _sync()

    benchmark(run)


@pytest.mark.parametrize("pairs", ["halves", "all"])
@pytest.mark.parametrize("protocol", ["in_situ", "decomposition"])
def test_capture(benchmark, vit, protocol, pairs):
    model, images = vit

    def run():
        with torch.no_grad(), vk.capture(model, protocol=protocol, pairs=pairs) as acts:
            model(images)
        return vk.pairwise_plasticity(acts).stats.cpu()

    stats = benchmark(run)
    assert torch.isfinite(stats).all()


def test_pairwise_plasticity_tensors(benchmark):
    gen = torch.Generator().manual_seed(0)
    acts = {c: [(torch.randn(16, 197, 192, generator=gen).to(DEVICE),
                 torch.randn(16, 197, 192 * (4 if c == "FC1" else 1), generator=gen).to(DEVICE))
                for _ in range(12)] for c in ("LN1", "MHA", "LN2", "FC1", "FC2")}
    res = benchmark(lambda: vk.pairwise_plasticity(acts).stats.cpu())
    assert res.shape[:2] == (5, 12)
