"""vitplast-kernels: fused pairwise plasticity measurements for transformer components.

Paired reductions (``pair_sq_distances``, ``pair_distances``, ``pair_ratios``) run on the C++ CPU
kernels, Triton or CUDA kernels on GPUs, or a PyTorch reference (``backend=``).
"""

from __future__ import annotations

from ._extension import cpu_extension_available, cuda_extension_available
from ._library import register_fakes as _register_fakes
from .all_pairs import (
    all_pair_distances,
    all_pair_ratios,
    all_pair_sq_distances,
    all_pair_sq_distances_reference,
)
from .backends import backend_names
from .capture import Capture, capture
from .paired import (
    pair_distances,
    pair_ratios,
    pair_sq_distances,
    pair_sq_distances_grouped,
    ratio_from_sq,
)
from .pairing import Pairing, get_pairing, register_pairing
from .pairing_all import AllPairs  # registers pairs="all"
from .plasticity import pairwise_plasticity
from .reference import pair_ratios_reference, pair_sq_distances_reference
from .result import PlasticityResult

__version__ = "0.1.0"

_register_fakes()

__all__ = [
    "AllPairs",
    "all_pair_distances",
    "all_pair_ratios",
    "all_pair_sq_distances",
    "all_pair_sq_distances_reference",
    "Capture",
    "PlasticityResult",
    "capture",
    "Pairing",
    "get_pairing",
    "pairwise_plasticity",
    "register_pairing",
    "backend_names",
    "cpu_extension_available",
    "cuda_extension_available",
    "pair_distances",
    "pair_ratios",
    "pair_ratios_reference",
    "pair_sq_distances",
    "pair_sq_distances_grouped",
    "pair_sq_distances_reference",
    "ratio_from_sq",
]
