"""What a model family's builder is asked for and what it gives: `BuildRequest` (the classes of the
head, the one-time pretraining of a family that has one) and
`BuiltModel` (the network with its input size, its own input preparation and where its weights came
from); `input_size` reads a built network's own input size."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..data.transforms import ImageTransform


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """What `vitplast.models.builder.build_model` asks of a family besides the `ModelPlan`: a head of
    ``num_classes``; ``cache_dir``, ``seed``, ``pretrain_config`` and ``progress``: the one-time
    pretraining of a family that has one (the digits ViT)."""

    num_classes: int
    cache_dir: str | os.PathLike | None = None
    seed: int = 0
    pretrain_config: dict | None = None
    progress: bool = False


@dataclasses.dataclass
class BuiltModel:
    net: object  # torch.nn.Module, in eval mode, float32, on the CPU
    img_size: int
    description: str
    name: str
    timm_kwargs: dict
    transform: ImageTransform | None  # the model's own input preparation, at img_size (None: it has none)
    origin: dict  # where the weights came from: {"kind", and "file" / "hub_id" / "revision" / "dir"}
    trust_remote_code: bool = False  # whether the model folder's own Python code was allowed to run


def input_size(net, img_size: int | None = None) -> int:
    """The model's own input size (``patch_embed.img_size``, a transformers config's ``image_size``),
    else ``img_size`` (a model without one takes images resized to it), else ValueError."""
    size = getattr(getattr(net, "patch_embed", None), "img_size", None)
    if size is None:
        size = getattr(net, "image_size", None)
    if isinstance(size, (tuple, list)) and size:
        return int(size[-1])
    if isinstance(size, int):
        return size
    if img_size is None:
        raise ValueError(f"--img-size is needed: cannot read the input size of {type(net).__name__}")
    return int(img_size)
