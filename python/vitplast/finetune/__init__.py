"""``vitplast finetune``: finetune chosen components, monitoring plasticity every step (:func:`finetune`)."""

from .command import finetune, run_name
from .loop import SimulatedKill
from .model import build_model
from .selection import unit_sizes
from .trainable import COMPONENTS

__all__ = ["COMPONENTS", "SimulatedKill", "build_model", "finetune", "run_name", "unit_sizes"]
