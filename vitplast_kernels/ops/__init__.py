"""The public ops: validate the inputs, pick a backend, call it (each op's fake beside it)."""

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
