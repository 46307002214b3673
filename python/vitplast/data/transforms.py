"""How images become a model's input: `ImageTransform`, one description of a model's input preparation (size,
mean, std, interpolation, crop), whoever declares it (timm's data config, a transformers image processor, the
digits ViT, or the fixed transform of ``--no-model-transform``).

- image files (ImageFolder, CIFAR) go through timm's ``create_transform`` built from it: at evaluation a
  resize and centre crop (``crop_pct``, ``crop_mode``) then normalisation; when finetuning, on the train
  split, timm's train-time augmentation (random resized crop, horizontal flip, colour jitter);
- in-memory images in ``[0, 1]`` (the digits) are normalised with its mean and std
  (`ImageTransform.normalise`);
- no transform (None) is each dataset's own, fixed preparation (``--no-model-transform``): image files get
  `fixed_transform` (a bilinear resize of the shorter side to the input size, a centre crop, ImageNet mean and
  std), the digits are scaled to ``[-1, 1]``;
- `with_overrides`: what a `TransformRequest` asks applied (``--mean``/``--std`` and ``--no-model-transform``;
  the command-line data options give one: `vitplast.options.groups.DataOptions.transform_request`);
- `transform_record`: the JSON-ready description the output files record.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torchvision / timm default normalisation for natural images (ImageNet statistics)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_MODES = ("center", "squash", "border")


@dataclasses.dataclass(frozen=True)
class ImageTransform:
    """A model's input preparation: ``size`` (the square side fed to the model), per-channel ``mean``
    and ``std`` (of images in ``[0, 1]``), ``interpolation`` of the resize, ``crop_pct`` (the crop's
    share of the resized image) and ``crop_mode`` (timm's: ``center`` resizes the shorter side to
    ``size / crop_pct`` then crops, ``squash`` resizes both sides). ``source`` says who declared it."""

    size: int
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bilinear"
    crop_pct: float = 1.0
    crop_mode: str = "center"
    source: str = "fixed"

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"transform size must be a positive int, got {self.size!r}")
        if len(self.mean) != 3 or len(self.std) != 3 or any(s <= 0 for s in self.std):
            raise ValueError(f"transform mean and std must hold 3 values (std > 0), got {self.mean}, "
                             f"{self.std}")
        if self.crop_mode not in CROP_MODES or not 0 < self.crop_pct <= 1:
            raise ValueError(f"transform crop must be one of {CROP_MODES} with 0 < crop_pct <= 1, got "
                             f"{self.crop_mode!r}, {self.crop_pct!r}")

    def resized(self, size: int) -> ImageTransform:
        """The same preparation for another input size."""
        return dataclasses.replace(self, size=int(size))

    def image_transform(self, *, augment: bool = False):
        """The torchvision transform of a PIL image: timm's ``create_transform`` (evaluation, or with
        ``augment`` its train-time augmentation) with this size, interpolation, crop, mean and std."""
        from timm.data import create_transform

        crop = {} if augment else {"crop_pct": self.crop_pct, "crop_mode": self.crop_mode}  # evaluation's
        return create_transform(is_training=augment, input_size=(3, self.size, self.size),
                                interpolation=self.interpolation, mean=self.mean, std=self.std, **crop)

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        """In-memory images ``(N, 3, H, W)`` in ``[0, 1]``, normalised with this mean and std."""
        import torch

        mean = torch.tensor(self.mean, dtype=images.dtype).view(1, 3, 1, 1)
        std = torch.tensor(self.std, dtype=images.dtype).view(1, 3, 1, 1)
        return (images - mean) / std

    def record(self) -> dict:
        """What the output files record of it."""
        return {**dataclasses.asdict(self), "mean": list(self.mean), "std": list(self.std)}


FIXED = "fixed: image files resized (bilinear) and centre-cropped, ImageNet mean and std; digits in [-1, 1]"


def fixed_transform(size: int) -> ImageTransform:
    """The fixed preparation of image files (no model's own): bilinear resize of the shorter side,
    centre crop, ImageNet mean and std."""
    return ImageTransform(size, IMAGENET_MEAN, IMAGENET_STD, "bilinear", 1.0, "center", FIXED)


def transform_record(transform: ImageTransform | None, size: int) -> dict:
    """What the output files record of the images' preparation at input ``size`` (None: the fixed one)."""
    return (transform or fixed_transform(size)).record()


def from_data_config(config: dict, source: str) -> ImageTransform:
    """An `ImageTransform` from a timm data config (``input_size``, ``interpolation``, ``mean``,
    ``std``, ``crop_pct``, ``crop_mode``; what ``timm.data.resolve_model_data_config`` returns)."""
    size = config.get("input_size") or (3, 224, 224)
    mean = tuple(float(v) for v in config.get("mean") or IMAGENET_MEAN)
    std = tuple(float(v) for v in config.get("std") or IMAGENET_STD)
    return ImageTransform(int(size[-1]), mean, std, str(config.get("interpolation") or "bilinear"),
                          float(config.get("crop_pct") or 1.0), str(config.get("crop_mode") or "center"),
                          source)


@dataclasses.dataclass(frozen=True)
class TransformRequest:
    """How the caller wants a model's images prepared: with the model's own transform
    (``model_transform``; False: each dataset's fixed preparation), and per-channel ``mean`` and
    ``std`` in place of its own (None: keep them)."""

    model_transform: bool = True
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None


def with_overrides(model: ImageTransform, request: TransformRequest) -> ImageTransform | None:
    """``model`` (the model's own transform), or without ``request.model_transform`` None (each
    dataset's fixed preparation), with the request's ``mean``/``std`` in place of its mean and std (the
    fixed geometry then takes them too)."""
    if request.mean is None and request.std is None:
        return model if request.model_transform else None
    out = model if request.model_transform else fixed_transform(model.size)
    return dataclasses.replace(out, mean=tuple(request.mean or out.mean), std=tuple(request.std or out.std),
                               source=f"{out.source}; --mean/--std")
