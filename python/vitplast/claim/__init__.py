"""``vitplast claim``: does plasticity predict which component to finetune? (`claim`)"""

from .experiment import claim, claim_options
from .options import ClaimOptions

__all__ = ["ClaimOptions", "claim", "claim_options"]
