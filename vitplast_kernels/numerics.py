"""Error models and constants shared by the kernels and the op layer.

``KERNEL_DTYPES`` are the input dtypes the hand-written kernels take (float64 runs on the PyTorch path).
The Gram identity ``S_ij = n_i + n_j - 2 G_ij`` cancels when two rows are close; these functions give
the estimated Gram error of a split-K product and the threshold below which a Gram-derived distance is
not trusted (see `vitplast_kernels.ops.all_pairs` for the design).
"""

from __future__ import annotations

import math

import torch

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what the hand-written kernels take

U32 = 2.0**-24  # unit roundoff of float32
ETA = 5e-6  # relative error budget on the distance spent on the Gram error (half of 1e-5)
C_CPU = 0.25  # Gram error constant of the CPU path (five times its worst case, see ops.all_pairs)


def gram_error(k_total: int, splits: int, c: float, product_err: float = 0.0) -> float:
    """Estimated relative error of a split-K Gram entry (relative to ``||a_i|| ||a_j||``)."""
    chunk = max(1, math.ceil(k_total / splits))
    return max(2 * U32, c * U32 * math.sqrt(chunk / splits)) + product_err


def reliability_threshold(eps: float) -> float:
    """``tau``: a Gram-derived ``S_ij`` is trusted when ``S_ij >= tau * (n_i + n_j)``."""
    return eps / ETA


UNDERFLOW_FLOOR = 2.0**-90  # per element of a row: see underflow_floor


def underflow_floor(k_total: int) -> float:
    """A float32 Gram of rows of ``k_total`` elements is trusted only when ``n_i + n_j >= k_total *
    2^-90`` (and finite). Products below float32's normal range (2^-126) are subnormal or flushed to
    zero (tensor cores, fast-math), and tf32x3 loses the low part of elements under about 2^-115: count
    every element under 2^-100 as lost. Over such a pair the lost part is at most ``2^-36 (n_i + n_j)``,
    far inside the error budget; pairs below the floor (rows scaled by 1e-30, say) are recomputed
    directly in float64."""
    return k_total * UNDERFLOW_FLOOR
