"""Bounds on a model's size, checked before anything is built: an absurd size (100 000 layers, a width
of millions, a 100 000-pixel input) is refused by the option that set it, with the bound, instead of
exhausting memory or time inside a constructor.

`check_model_size` reads the size keywords of timm's and transformers' constructors (``depth``,
``embed_dim``, ``num_hidden_layers``, ...) and the digits ViT's config fields, bounds each, and bounds the
parameter count they imply for a ViT (``depth * (4 + 2 * mlp_ratio) * width**2``, the defaults of a
ViT-Base standing in for what is not given)."""

from __future__ import annotations

import math

MAX_IMG_SIZE = 4096  # pixels a side: ViT-H/14 at 4096 has 85 000 tokens a sequence
MAX_PARAMETERS = 10**10  # 40 GB of float32 weights: 5x ViT-G/14
# keyword -> its largest accepted value
SIZE_LIMITS = {
    "depth": 1000, "num_layers": 1000, "num_hidden_layers": 1000,
    "embed_dim": 65536, "hidden_size": 65536, "width": 65536,
    "num_heads": 4096, "num_attention_heads": 4096,
    "mlp_ratio": 64, "intermediate_size": 4 * 65536,
    "img_size": MAX_IMG_SIZE, "image_size": MAX_IMG_SIZE, "patch_size": MAX_IMG_SIZE,
}
_DEPTH = ("depth", "num_layers", "num_hidden_layers")
_WIDTH = ("embed_dim", "hidden_size", "width")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _first(values: dict, keys: tuple[str, ...], default: float) -> tuple[float, str | None]:
    return next(((float(values[k]), k) for k in keys if _number(values.get(k))), (default, None))


def check_model_size(values: dict, what: str) -> None:
    """ValueError ``"{what} KEY=VALUE: ..."`` when a size keyword of ``values`` is beyond its bound
    (`SIZE_LIMITS`), or the parameter count they imply is beyond `MAX_PARAMETERS`."""
    for key, limit in SIZE_LIMITS.items():
        v = values.get(key)
        if _number(v) and (not math.isfinite(v) or v > limit):
            raise ValueError(f"{what} {key}={v!r}: at most {limit} (a larger model would not fit in "
                             "memory; nothing was built)")
    depth, depth_key = _first(values, _DEPTH, 12)
    width, width_key = _first(values, _WIDTH, 768)
    ratio = values.get("mlp_ratio", 4.0)
    if "intermediate_size" in values and width:
        ratio = float(values["intermediate_size"]) / width
    ratio = float(ratio) if _number(ratio) else 4.0
    params = depth * (4 + 2 * ratio) * width**2
    if (depth_key or width_key) and params > MAX_PARAMETERS:
        given = ", ".join(f"{k}={values[k]!r}" for k in (depth_key, width_key) if k)
        raise ValueError(f"{what} {given}: about {params:.2g} parameters, beyond the {MAX_PARAMETERS:.0e} "
                         "this package builds (nothing was built)")
