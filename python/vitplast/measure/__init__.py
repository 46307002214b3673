"""``vitplast measure``: the plasticity of every component of a model (:func:`measure`)."""

from .run import measure

__all__ = ["measure"]
