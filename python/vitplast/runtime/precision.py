"""The one autocast helper of the commands: ``--amp`` (``none``, ``bf16``, ``fp16``) as a context-manager
factory for a device."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

AMP_CHOICES = ("none", "bf16", "fp16")
# other spellings accepted for --amp (and for the deprecated --dtype of measure)
AMP_ALIASES = {"float32": "none", "fp32": "none", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}


def autocast(amp: str, device) -> Callable[[], AbstractContextManager]:
    """A factory of autocast contexts for ``device`` (a ``torch.device``): ``amp="none"`` gives no-ops."""
    import torch

    if amp == "none":
        return contextlib.nullcontext
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)
