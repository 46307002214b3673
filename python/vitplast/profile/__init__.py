"""``vitplast profile``: time and size a plasticity measurement on a large model (`profile`, its
options `ProfileOptions`)."""

from .options import DEVICE_DEFAULTS, ProfileOptions
from .run import profile

__all__ = ["DEVICE_DEFAULTS", "ProfileOptions", "profile"]
