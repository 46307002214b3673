"""All distinct pairs of one batch: the ``(N, N)`` squared-distance matrix and the rate matrix.

``all_pair_sq_distances(a)`` for ``a`` of shape ``(N, ...)`` (float32, float16 or bfloat16, any
strides; float64 runs on the ``"torch"`` path and gives float64 results) returns ``S`` of shape
``(N, N)``, float32, symmetric, zero diagonal, with
``S[i, j] = sum_k (a[i, k] - a[j, k])^2`` (differences taken after up-casting). ``all_pair_ratios(fx,
x)`` returns ``sqrt(S_fx / S_x)`` with NaN on the diagonal and wherever ``S_x == 0`` (identical
sequences: no rate). These are what ``pairs="all"`` (the U-statistic over the N(N-1)/2 distinct pairs)
is built on: it takes the float64 matrix of `all_pair_sq_sums`, which every backend computes
(distances and rates are formed from it in float64, then cast: right wherever their true value is a
finite float32 number, even when ``S`` is not). The op is differentiable: with ``G = g + g^T`` the
symmetrised upstream gradient, ``grad_a = 2 (diag(rowsum(G)) - G) a`` (formed in float64, returned in
``a``'s dtype).

Backends (``backend=``): ``"cpu"`` Gram matrix from the AVX-512 tile kernel of ``_C`` (lower triangle
only; BLAS ``torch.bmm`` of the lower block triangle on CPUs without AVX-512) on CPU tensors;
``"triton"`` Gram matrix through ``tl.dot`` (tensor cores) on CUDA tensors, and on CPU tensors when
``TRITON_INTERPRET=1``; ``"torch"`` the plain reference path (one direct difference per pair, any
device, slow: O(N^2 K) memory traffic); ``"auto"``: CUDA -> triton, CPU -> cpu.

How the fast paths stay exact (the design)
------------------------------------------
The Gram identity ``S_ij = n_i + n_j - 2 G_ij`` (``n_i = G_ii``) cancels when two rows are close:
an absolute error ``e`` on the Gram entries becomes a relative error on the distance of about
``e (n_i + n_j) / S_ij``. Three measures keep every pair within 1e-5 relative (of the distance,
against float64) for float32, float16 and bfloat16 inputs:

1. **Split-K, float64 combination.** The flattened length ``K = n * d`` is cut into ``S`` chunks of
   length ``L``; each chunk's Gram is a float32 product (float32 sums of 512-column blocks in the CPU
   tile kernel, BLAS ``bmm`` without it, one program per tile and chunk on GPU) and the ``S``
   partial Grams are summed in float64 in a fixed order (deterministic, no atomics).
   Partial errors are independent, so the Gram error drops from about
   ``c u sqrt(K)`` to ``c u sqrt(K) / S`` (``u = 2^-24``); ``c`` is the largest
   ``rel_err(d) * r / (u sqrt(L / S))`` over the pairs, ``r = S_ij / (n_i + n_j)``, which
   ``bench/all_pairs.py`` reports as ``c_gram``. bf16/fp16 products are exact in float32, float32
   inputs on GPU use ``tf32x3`` (products to ~2^-21).
2. **Detect and recompute.** With ``eps = max(2u, C u sqrt(L / S))`` (``C = 0.25`` on CPU, five
   times the largest ``c_gram`` of the CPU benchmark; on GPU ``C = 1.0`` plus the tf32x3 product error
   plus the truncation bias of the tensor-core accumulator, see ``backends/triton/all_pairs.py``) a pair is
   *unreliable* when ``S_ij < eps / eta * (n_i + n_j)`` with ``eta = 5e-6`` (half the budget), or
   when the float32 Gram left its range (``n_i + n_j`` not finite, or under
   `underflow_floor`; the CPU path first rescales such rows by powers
   of two, see ``backends/cpu.py``). Unreliable pairs are
   recomputed directly from the original rows: on CPU through ``pair_sq_distances`` on gathered
   rows (one host sync, CPU only); on GPU by a masked direct kernel launched over every pair of
   the triangle that exits at once for reliable pairs (no host-device sync; float64 accumulation).
   Identical rows are always unreliable (S = 0) and come out exactly 0.
3. **Centre when many pairs are unreliable (CPU).** Distances are translation invariant but the
   cancellation is not: rows sharing a large common component (positional embeddings, massive
   activations) all have small ``r``. A probe Gram over 4 column slices of 512 (a few % of the
   cost) predicts whether more than ``N / 2`` pairs will be unreliable; if so the rows are centred
   (the first row subtracted, in float32: any common vector works, this one costs no extra read)
   before the Gram; if the probe missed it, the Gram is redone once on centred rows. Centring
   always would cost a full extra pass over the data on CPU (comparable to the Gram itself), so it
   is done only when it pays.

Only the Gram's lower triangle is used; on GPU only the triangle's tiles are computed, norms come from
the diagonal tiles and the distance epilogue (norms, cancellation test, mirror, zero diagonal) is fused
into the split-K reduction kernel.
"""

from __future__ import annotations

import torch

from ..backends import resolve
from . import validate
from .paired import ratio_from_sq, sqrt0


@torch.library.custom_op("vitplast::all_pair_sq_distances", mutates_args=())
def _all_pair_sq_distances_op(a: torch.Tensor, backend: str) -> torch.Tensor:
    """``(N, ...) -> (N, N)`` float64 squared distances on the backend called ``backend``."""
    return resolve(backend, a.device, op="all_pairs", dtype=a.dtype).all_pairs(a.reshape(a.shape[0], -1))


def _all_pairs_fake(a: torch.Tensor, backend: str) -> torch.Tensor:
    torch._check(a.dim() >= 2, lambda: "a must have at least 2 dims")
    return a.new_empty((a.shape[0], a.shape[0]), dtype=torch.float64)


def all_pairs_grad(a: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Gradient in ``a (N, ...)`` of ``sum_ij grad[i, j] ||a[i] - a[j]||^2``: ``2 (diag(rowsum(G)) - G) a``
    with ``G = grad + grad^T``, in float64 when ``grad`` is (float32 otherwise), in ``a``'s dtype."""
    wide = torch.float64 if grad.dtype == torch.float64 else torch.float32
    x = a.reshape(a.shape[0], -1).to(wide)
    g = grad.to(wide)
    g = g + g.T
    return (2 * (g.sum(1, keepdim=True) * x - g @ x)).reshape(a.shape).to(a.dtype)


def _setup_all_pairs(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])


def _all_pairs_backward(ctx, grad: torch.Tensor):
    (a,) = ctx.saved_tensors
    return all_pairs_grad(a, grad), None


# registered by name, like the paired ops' (ops/paired.py)
torch.library.register_fake("vitplast::all_pair_sq_distances", _all_pairs_fake)
torch.library.register_autograd("vitplast::all_pair_sq_distances", _all_pairs_backward,
                                setup_context=_setup_all_pairs)


def all_pair_sq_sums(a: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(N, ...) -> (N, N)`` float64 ``S[i, j] = ||a[i] - a[j]||_F^2`` (the backends' sums)."""
    a = validate.check_tensor("a", a)
    return _all_pair_sq_distances_op(a, resolve(backend, a.device, op="all_pairs", dtype=a.dtype).name)


def all_pair_sq_distances(a: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(N, ...) -> (N, N)`` float32 ``S[i, j] = ||a[i] - a[j]||_F^2``: symmetric, zero diagonal.

    ``a`` is float32, float16 or bfloat16 (any strides); every entry has a relative error <= 1e-5
    against float64, near-duplicate rows included, and identical rows give exactly 0. float64 inputs
    give float64 results (exact, on the ``"torch"`` path).
    """
    return all_pair_sq_sums(a, backend=backend).to(validate.result_dtype(a))


def all_pair_distances(a: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(N, ...) -> (N, N)`` float32 Frobenius distances ``||a[i] - a[j]||``."""
    return sqrt0(all_pair_sq_sums(a, backend=backend)).to(validate.result_dtype(a))


def ratios_from_sq_matrices(num_sq: torch.Tensor, den_sq: torch.Tensor) -> torch.Tensor:
    """``(N, N)`` rates ``sqrt(num_sq / den_sq)``: NaN on the diagonal and where ``den_sq == 0``."""
    rates = ratio_from_sq(num_sq, den_sq)
    rates.diagonal().fill_(float("nan"))
    return rates


def all_pair_ratios(fx: torch.Tensor, x: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(N, ...) , (N, ...) -> (N, N)`` float32 rates ``||fx[i] - fx[j]|| / ||x[i] - x[j]||``.

    ``fx`` is the component's output for the inputs ``x`` (shapes after the leading dim may
    differ). NaN on the diagonal and wherever ``x[i] == x[j]`` (identical sequences: no rate).
    """
    fx = validate.check_tensor("fx", fx)
    x = validate.check_tensor("x", x)
    validate.check_output_input(fx, x)
    num = all_pair_sq_sums(fx, backend=backend)
    den = all_pair_sq_sums(x, backend=backend)
    return ratios_from_sq_matrices(num, den).to(torch.promote_types(validate.result_dtype(fx),
                                                                    validate.result_dtype(x)))
