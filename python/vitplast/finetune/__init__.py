"""``vitplast finetune``: finetune chosen components, monitoring plasticity every step.

Python users call `finetune` with a `FinetuneOptions` (or its keywords) for a grid, or
`train_run` with a `RunSpec` and what `prepare` found for one run (claim does)."""

from .grid import PlannedRun, config_mismatches, finetune, finetune_options, mismatch_message, plan_grid
from .loop import train_run
from .lora import import_peft
from .model import fresh_model
from .options import FinetuneOptions, RunSettings, check_trains
from .preflight import Prepared, PreparedModel, check_trains_fit, prepare, prepare_model
from .selection import TRAIN_ORDER, unit_sizes
from .spec import RunSpec, run_name

__all__ = ["TRAIN_ORDER", "FinetuneOptions", "PlannedRun", "Prepared", "PreparedModel", "RunSettings",
           "RunSpec", "check_trains", "check_trains_fit", "config_mismatches", "finetune", "finetune_options",
           "fresh_model", "import_peft", "mismatch_message", "plan_grid", "prepare", "prepare_model",
           "run_name", "train_run", "unit_sizes"]
