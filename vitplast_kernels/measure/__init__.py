"""The measurement layer: capture (hooks), presets (component maps), pairings, results, distributed
combination and `pairwise_plasticity`. It knows the kernels only through `vitplast_kernels.ops`."""

from .capture import Capture, capture
from .forward_check import MissedForwardError
from .monitor import Monitor, monitor
from .pairings import AllPairs, Pairing, get_pairing, register_pairing
from .plasticity import pairwise_plasticity
from .result import PlasticityResult

__all__ = ["AllPairs", "Capture", "MissedForwardError", "Monitor", "Pairing", "PlasticityResult", "capture",
           "get_pairing", "monitor", "pairwise_plasticity", "register_pairing"]
