"""``vitplast claim``: does plasticity predict which component to finetune? (`claim`)"""

from .experiment import claim, claim_options
from .options import ClaimOptions
from .result import ClaimResult

__all__ = ["ClaimOptions", "ClaimResult", "claim", "claim_options"]
