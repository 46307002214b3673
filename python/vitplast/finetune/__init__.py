"""``vitplast finetune``: finetune chosen components, monitoring plasticity every step.

Python users call `finetune` with a `FinetuneOptions` (or its keywords) for a grid of runs; `finetune_options`
gives the checked options without running them. What one run is made of lives in the package's modules (its
spec `vitplast.finetune.spec.RunSpec`, the checks before it `vitplast.finetune.preflight.prepare`, its loop
`vitplast.finetune.loop.train_run`), which claim builds on."""

from .grid import finetune, finetune_options
from .options import FinetuneOptions
from .result import FinetuneResult

__all__ = ["FinetuneOptions", "FinetuneResult", "finetune", "finetune_options"]
