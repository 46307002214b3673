"""``vitplast finetune``: finetune chosen components, monitoring plasticity every step.

Python users call :func:`finetune` with a :class:`FinetuneOptions` (or its keywords) for a grid, or
:func:`train_run` with a :class:`RunSpec` and what :func:`prepare` found for one run (claim does)."""

from .grid import finetune, finetune_options, grid_specs
from .loop import train_run
from .model import fresh_model
from .options import FinetuneOptions, RunSettings, check_trains
from .preflight import Prepared, prepare
from .selection import TRAIN_ORDER, unit_sizes
from .spec import RunSpec, run_name

__all__ = ["TRAIN_ORDER", "FinetuneOptions", "Prepared", "RunSettings", "RunSpec", "fresh_model",
           "check_trains", "finetune", "finetune_options", "grid_specs", "prepare", "run_name", "train_run",
           "unit_sizes"]
