"""``vitplast measure``: the plasticity of every component of a model, and the other criteria's
scores (`measure`, `measure_scores`, its options `MeasureOptions`)."""

from .options import MeasureOptions
from .run import measure, measure_scores

__all__ = ["MeasureOptions", "measure", "measure_scores"]
