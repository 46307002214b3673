"""The public ops: validate the inputs, pick a backend, call it.

Every ``vitplast::`` custom op is defined where its kernel lives (C++ schemas in csrc/, the Triton twins
in backends/triton/ops.py, the all-pairs op in `.all_pairs`) and gets its fake and autograd formula
in this package, registered by name with ``torch.library.register_fake`` / ``register_autograd``: the
paired ops and their Triton twins in `.paired` (shared), the all-pairs op in `.all_pairs`.
"""

from .all_pairs import all_pair_distances, all_pair_ratios, all_pair_sq_distances, ratios_from_sq_matrices
from .paired import pair_distances, pair_ratios, pair_sq_distances, pair_sq_distances_grouped, ratio_from_sq

__all__ = [
    "all_pair_distances",
    "all_pair_ratios",
    "all_pair_sq_distances",
    "pair_distances",
    "pair_ratios",
    "pair_sq_distances",
    "pair_sq_distances_grouped",
    "ratio_from_sq",
    "ratios_from_sq_matrices",
]
