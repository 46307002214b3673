"""Criteria that score every (component, layer) unit of a model, higher = finetune first, behind one interface
(`Criterion`), by name (`CRITERIA`), the one measuring loop (`measuring_loop`) they and the commands measure
with, and the one scoring service (`score_criteria`) the commands score and cache them through."""

from .base import Criterion, Setting, Units, resolve_units
from .loop import Batch, Measured, measure_plasticity, measuring_loop
from .registry import CRITERIA, get_criterion
from .result import Cost, CriterionResult
from .service import ScoreCache, Scores, ScoringRequest, cache_key, score_criteria

__all__ = ["CRITERIA", "Batch", "Cost", "Criterion", "CriterionResult", "Measured", "ScoreCache", "Scores",
           "ScoringRequest", "Setting", "Units", "cache_key", "get_criterion", "measure_plasticity",
           "measuring_loop", "resolve_units", "score_criteria"]
