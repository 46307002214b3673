"""The digits ViT's architecture: `DigitsConfig` (its shape and training recipe, every field checked),
`build_digits_vit` (the timm VisionTransformer it describes) and the checks of the options a user may
pass for it. Its pretraining, cache and shipped checkpoint are `vitplast.models.digits`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import warnings

from torch import nn

from vitplast.data.datasets import load_dataset
from vitplast.models.timm_models import create_vit

from .sizes import check_model_size
from .sources import DIGITS_MODEL


@dataclasses.dataclass(frozen=True)
class DigitsConfig:
    """Architecture and training recipe of the embedded digits ViT (every field enters the cache key)."""

    model: str = "vit_tiny_patch16_224"  # timm architecture, resized by the fields below
    img_size: int = 32
    patch_size: int = 8
    embed_dim: int = 64
    depth: int = 4
    num_heads: int = 2
    mlp_ratio: float = 4.0
    classes: str = "0-4"  # pretraining classes (digits spec 'digits:<classes>')
    epochs: int = 100
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.05
    warmup_epochs: int = 3
    label_smoothing: float = 0.1
    max_rotate_deg: float = 12.0  # augmentation: random rotation, scale and shift
    max_scale: float = 0.12
    max_shift: float = 0.12  # fraction of the image half-width

    def __post_init__(self) -> None:
        """Every field checked (ValueError naming it), so a bad override fails before any pretraining."""
        def bad(field: str, want: str) -> ValueError:
            return ValueError(f"DigitsConfig.{field} must be {want}, got {getattr(self, field)!r}")

        for f in ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "epochs", "batch_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(f, "a positive integer")
        if (isinstance(self.warmup_epochs, bool) or not isinstance(self.warmup_epochs, int)
                or self.warmup_epochs < 0):
            raise bad("warmup_epochs", "an integer >= 0")
        for f, low, high in (("mlp_ratio", 0, None), ("lr", 0, None), ("weight_decay", None, None),
                             ("label_smoothing", None, 1), ("max_rotate_deg", None, None),
                             ("max_scale", None, 1), ("max_shift", None, None)):
            v = getattr(self, f)
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
            if not ok or (low is not None and v <= low) or (high is not None and v >= high):
                raise bad(f, "a finite number " + ("> 0" if low is not None else ">= 0")
                          + (f" and < {high}" if high is not None else ""))
        if self.img_size % self.patch_size:
            raise bad("img_size", f"a multiple of patch_size ({self.patch_size})")

        check_model_size({k: getattr(self, k) for k in ("img_size", "patch_size", "embed_dim", "depth",
                                                         "num_heads", "mlp_ratio")}, "DigitsConfig")
        if self.embed_dim % self.num_heads:
            raise bad("embed_dim", f"a multiple of num_heads ({self.num_heads})")
        if not isinstance(self.model, str) or not self.model:
            raise bad("model", "a timm model name")
        if not isinstance(self.classes, str):
            raise bad("classes", "a digits class list such as '0-4'")

    def timm_kwargs(self) -> dict:
        """Keyword arguments that make ``create_vit(self.model, ...)`` build this architecture."""
        return dict(patch_size=self.patch_size, embed_dim=self.embed_dim, depth=self.depth,
                    num_heads=self.num_heads, mlp_ratio=self.mlp_ratio)

    def key(self, seed: int) -> str:
        """16 hex digits identifying (config, seed)."""
        blob = json.dumps({"config": dataclasses.asdict(self), "seed": seed, "v": 1}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_digits_vit(config: DigitsConfig | None = None, weights: str | os.PathLike | None = None,
                     num_classes: int | None = None) -> nn.Module:
    """The digits ViT architecture (random init unless ``weights``; no warning for random init here).

    ``num_classes`` defaults to the number of pretraining classes; another value gets a fresh head
    (with the usual head-shape warning when ``weights`` are loaded).
    """
    cfg = config or DigitsConfig()
    n = num_classes if num_classes is not None else load_dataset(f"digits:{cfg.classes}", "val").num_classes
    with warnings.catch_warnings():
        if weights is None:
            warnings.filterwarnings("ignore", message=".*no weights given.*")
        return create_vit(cfg.model, n, img_size=cfg.img_size,
                          weights=None if weights is None else os.fspath(weights), **cfg.timm_kwargs())


def digits_config(pretrain_config: dict | None = None) -> DigitsConfig:
    """The digits ViT's `DigitsConfig` with ``pretrain_config``'s overrides (ValueError naming an
    unknown field or a bad value)."""
    fields = {f.name for f in dataclasses.fields(DigitsConfig)}
    if unknown := sorted(set(pretrain_config or {}) - fields):
        raise ValueError(f"pretrain_config: unknown DigitsConfig field(s) {unknown}; known: {sorted(fields)}")
    try:
        return DigitsConfig(**(pretrain_config or {}))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"pretrain_config: {exc}") from None


def check_digits_options(model_kwargs: dict | None, img_size: int | None,
                         pretrain_config: dict | None = None) -> int:
    """The digits ViT's input size; ValueError when ``--model-arg`` or another ``--img-size`` is asked
    of its fixed architecture."""
    size = digits_config(pretrain_config).img_size
    if img_size is not None and img_size != size:
        raise ValueError(f"--img-size {img_size}: {DIGITS_MODEL} takes {size}x{size} images")
    if model_kwargs:
        raise ValueError(f"--model-arg does not apply to {DIGITS_MODEL} (its architecture is fixed)")
    return size
