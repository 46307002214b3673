"""``vitplast measure``: the plasticity of every component of a model (`measure`, its options
`MeasureOptions`)."""

from .options import MeasureOptions
from .run import measure

__all__ = ["MeasureOptions", "measure"]
