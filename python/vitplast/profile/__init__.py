"""``vitplast profile``: time and size a plasticity measurement on a large model (:func:`profile`)."""

from .command import profile, resolve_defaults

__all__ = ["profile", "resolve_defaults"]
