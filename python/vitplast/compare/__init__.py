"""``vitplast compare``: the plasticity of two or more measurements side by side (the same model before
and after finetuning, or on two datasets), as a table and a figure with 95% confidence intervals
(`compare`, its options `CompareOptions`)."""

from .options import CompareOptions
from .run import compare
from .table import Comparison

__all__ = ["CompareOptions", "Comparison", "compare"]
