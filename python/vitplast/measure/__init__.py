"""``vitplast measure``: the plasticity of every component of a model (:func:`measure`, its options
:class:`MeasureOptions`)."""

from .options import MeasureOptions
from .run import measure

__all__ = ["MeasureOptions", "measure"]
