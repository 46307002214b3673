"""A tiny timm ViT (2 blocks of width 16 on 16x16 images, 3 classes) and its data, shared by the
criteria tests (imported by name: pytest puts this folder on the path)."""

from __future__ import annotations

import timm
import torch
from vitplast.criteria import Batch, Setting

CLASSES = 3


def tiny_model(seed: int) -> torch.nn.Module:
    """The same random 'pretrained' trunk for every seed; the head drawn from ``seed``."""
    torch.manual_seed(100)
    net = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=4, embed_dim=16,
                            depth=2, num_heads=2, num_classes=CLASSES)
    torch.manual_seed(seed)
    net.reset_classifier(CLASSES)
    return net.eval()


def tiny_setting(seeds=(0, 1)) -> Setting:
    g = torch.Generator().manual_seed(1)
    batches = [Batch(torch.randn(6, 3, 16, 16, generator=g), torch.randint(0, CLASSES, (6,), generator=g))
               for _ in range(2)]

    def pairs():
        return [torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(10 + k)) for k in range(2)]

    return Setting(tiny_model, seeds=tuple(seeds), batches=batches, pair_batches=pairs)
