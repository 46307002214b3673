"""Float64 references: the truth for tests and benchmarks (the ops never call them)."""

from .reference import all_pair_sq_distances_reference, pair_ratios_reference, pair_sq_distances_reference

__all__ = ["all_pair_sq_distances_reference", "pair_ratios_reference", "pair_sq_distances_reference"]
