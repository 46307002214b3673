"""Criteria that score every (component, layer) unit of a model, higher = finetune first, behind one
interface (`Criterion`), by name (`CRITERIA`), and the one measuring loop
(`measuring_loop`) they and the commands measure with."""

from .base import Criterion, Setting, Units, resolve_units
from .cost import Cost
from .loop import Batch, Measured, measure_plasticity, measuring_loop
from .registry import CRITERIA, get_criterion, parse_criteria
from .result import CriterionResult

__all__ = ["CRITERIA", "Batch", "Cost", "Criterion", "CriterionResult", "Measured", "Setting", "Units",
           "get_criterion", "measure_plasticity", "measuring_loop", "parse_criteria", "resolve_units"]
