"""``vitplast claim``: does plasticity predict which component to finetune? (:func:`claim`)"""

from .command import claim

__all__ = ["claim"]
