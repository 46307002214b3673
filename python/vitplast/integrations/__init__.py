"""Plasticity monitoring inside the training loops of other libraries.

- `PlasticityCallback` — a Lightning ``Callback`` (extra ``lightning``);
- `PlasticityTrainerCallback` — a Hugging Face ``transformers.TrainerCallback`` (extra ``hf``).

Both measure the optimizer steps whose number (in the trainer's own numbering) is a multiple of
``every`` through `vitplast_kernels.monitor`, log the per-component plasticity (mean over layers,
and per layer) through the trainer's own logging at the step it was measured, combine ranks under
DDP, and write ``plasticity.json`` at the end of training. The frameworks are imported only when
one of the callbacks is asked for; a missing one gives an ``ImportError`` naming the extra to install.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module of this package, framework module it needs, extra that installs it)
_EXPORTS = {
    "PlasticityCallback": ("lightning_callback", "lightning", "lightning"),
    "PlasticityTrainerCallback": ("hf_callback", "transformers", "hf"),
}

__all__ = ["PlasticityCallback", "PlasticityTrainerCallback"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, framework, extra = _EXPORTS[name]
    try:
        importlib.import_module(framework)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != framework:  # the framework itself, or one of its modules
            raise
        raise ImportError(
            f"vitplast.integrations.{name} needs the {framework!r} package, which is not installed: "
            f"pip install 'vitplast-kernels[{extra}]' (or pip install {framework})"
        ) from None
    globals()[name] = value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
