"""vitplast-kernels: fused pairwise plasticity measurements for transformer components.

Paired reductions (``pair_sq_distances``, ``pair_distances``, ``pair_ratios``) and all-pairs reductions
run on the C++ CPU kernels, Triton or CUDA kernels on GPUs, or a PyTorch path (``backend=``); capture,
pairings and results live in `vitplast_kernels.measure`. This module only re-exports.
"""

from __future__ import annotations

from .backends import backend_names
from .backends.extension import cpu_extension_available, cuda_extension_available
from .measure import (
    AllPairs,
    Capture,
    MissedForwardError,
    Monitor,
    Pairing,
    PlasticityResult,
    capture,
    get_pairing,
    monitor,
    pairwise_plasticity,
    register_pairing,
)
from .ops import (
    all_pair_distances,
    all_pair_ratios,
    all_pair_sq_distances,
    pair_distances,
    pair_ratios,
    pair_sq_distances,
    pair_sq_distances_grouped,
    ratio_from_sq,
)
from .testing import all_pair_sq_distances_reference, pair_ratios_reference, pair_sq_distances_reference

__version__ = "0.1.0"

__all__ = [
    "AllPairs",
    "all_pair_distances",
    "all_pair_ratios",
    "all_pair_sq_distances",
    "all_pair_sq_distances_reference",
    "Capture",
    "MissedForwardError",
    "Monitor",
    "monitor",
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
