"""All distinct pairs of one batch: the ``(N, N)`` squared-distance matrix and the rate matrix.

``all_pair_sq_distances(a)`` for ``a`` of shape ``(N, ...)`` (float32, float16 or bfloat16, any
strides) returns ``S`` of shape ``(N, N)``, float32, symmetric, zero diagonal, with
``S[i, j] = sum_k (a[i, k] - a[j, k])^2`` (differences taken after up-casting). ``all_pair_ratios(fx,
x)`` returns ``sqrt(S_fx / S_x)`` with NaN on the diagonal and wherever ``S_x == 0`` (identical
sequences: no rate). These are what ``pairs="all"`` (the U-statistic over the N(N-1)/2 distinct pairs)
is built on.

Backends (``backend=``): ``"cpu"`` Gram matrix through BLAS (``torch.bmm``) on CPU tensors;
``"triton"`` Gram matrix through ``tl.dot`` (tensor cores) on CUDA tensors, and on CPU tensors when
``TRITON_INTERPRET=1``; ``"torch"`` the plain reference path (one direct difference per pair, any
device, slow: O(N^2 K) memory traffic); ``"auto"``: CUDA -> triton, CPU -> cpu.

How the fast paths stay exact (the design, measured)
----------------------------------------------------
The Gram identity ``S_ij = n_i + n_j - 2 G_ij`` (``n_i = G_ii``) cancels when two rows are close:
an absolute error ``e`` on the Gram entries becomes a relative error on the distance of about
``e (n_i + n_j) / S_ij``. Three measures keep every pair within 1e-5 relative (of the distance,
against float64) for float32, float16 and bfloat16 inputs:

1. **Split-K, float64 combination.** The flattened length ``K = n * d`` is cut into ``S`` chunks of
   length ``L``; each chunk's Gram is a float32 product (BLAS ``bmm`` on CPU, one program per tile
   and chunk on GPU) and the ``S`` partial Grams are summed in float64 in a fixed order
   (deterministic, no atomics). Partial errors are independent, so the Gram error drops from about
   ``c u sqrt(K)`` to ``c u sqrt(K) / S`` (``u = 2^-24``). Measured on this machine's MKL,
   N=128, K=257*384 (max over pairs of ``rel_err(d) * r``, ``r = S_ij / (n_i + n_j)``): one
   chunk 8.0e-7, S=8 1.2e-7, S=16 5.5e-8, S=32 3.8e-8, i.e. ``c ~= 0.05``. bf16/fp16 products
   are exact in float32, float32 inputs on GPU use ``tf32x3`` (products to ~2^-21).
2. **Detect and recompute.** With ``eps = max(2u, C u sqrt(L / S))`` (``C = 0.25`` on CPU, five
   times the measured worst; on GPU ``C = 1.0`` plus the tf32x3 product error plus the measured
   truncation bias of the tensor-core accumulator, see ``triton_all_pairs``) a pair is
   *unreliable* when ``S_ij < eps / eta * (n_i + n_j)`` with ``eta = 5e-6`` (half the budget), or
   when its value is not finite. Unreliable pairs are
   recomputed directly from the original rows: on CPU through ``pair_sq_distances`` on gathered
   rows (one host sync, CPU only); on GPU by a masked direct kernel launched over every pair of
   the triangle that exits at once for reliable pairs (no host-device sync; float64 accumulation).
   Identical rows are always unreliable (S = 0) and come out exactly 0.
3. **Centre when many pairs are unreliable (CPU).** Distances are translation invariant but the
   cancellation is not: rows sharing a large common component (positional embeddings, massive
   activations) all have small ``r``. A probe Gram over 8 column slices of 512 (a few % of the
   cost) predicts whether more than ``N / 2`` pairs will be unreliable; if so the rows are centred
   (the first row subtracted, in float32: any common vector works, this one costs no extra read)
   before the Gram; if the probe missed it, the Gram is redone once on centred rows. Centring
   always would cost a full extra pass over the data on CPU (measured about as long as the Gram
   itself), so it is done only when it pays.

Only the Gram's lower triangle is used; on GPU only the triangle's tiles are computed, norms come from
the diagonal tiles and the distance epilogue (norms, cancellation test, mirror, zero diagonal) is fused
into the split-K reduction kernel.
"""

from __future__ import annotations

import math

import torch

from . import _validate
from .paired import ratio_from_sq

U32 = 2.0**-24  # unit roundoff of float32
ETA = 5e-6  # relative error budget on the distance spent on the Gram error (half of 1e-5)
C_CPU = 0.25  # Gram error constant of the CPU path (measured worst ~0.05, see module docstring)
CPU_CHUNK = 4096  # target chunk length L of the CPU split-K
# below this many multiply-adds (N * N * K) the CPU path runs on one thread: the work takes about a
# millisecond and OpenMP fork/join on a loaded machine costs more (measured on the 2-core CI box under
# load: 48 ms with 2 threads vs 0.4 ms with 1 for N=8, K=197*384)
CPU_SINGLE_THREAD_MACS = 1 << 27


def gram_error(k_total: int, splits: int, c: float, product_err: float = 0.0) -> float:
    """Estimated relative error of a split-K Gram entry (relative to ``||a_i|| ||a_j||``)."""
    chunk = max(1, math.ceil(k_total / splits))
    return max(2 * U32, c * U32 * math.sqrt(chunk / splits)) + product_err


def reliability_threshold(eps: float) -> float:
    """``tau``: a Gram-derived ``S_ij`` is trusted when ``S_ij >= tau * (n_i + n_j)``."""
    return eps / ETA


# ---------------------------------------------------------------------------------------------
# reference and the plain torch path
# ---------------------------------------------------------------------------------------------


def all_pair_sq_distances_reference(a: torch.Tensor) -> torch.Tensor:
    """``(N, ...) -> (N, N)`` float64 truth: direct differences of float64 up-casts."""
    x = a.detach().reshape(a.shape[0], -1).to(torch.float64)
    out = torch.zeros(x.shape[0], x.shape[0], dtype=torch.float64, device=x.device)
    for i in range(x.shape[0] - 1):
        d = (x[i + 1 :] - x[i]).square().sum(1)
        out[i, i + 1 :] = d
        out[i + 1 :, i] = d
    return out


def _all_pairs_torch(x: torch.Tensor) -> torch.Tensor:
    """``(N, K) -> (N, N)`` float32, one direct difference per pair (backend ``"torch"``)."""
    n = x.shape[0]
    out = torch.zeros(n, n, dtype=torch.float32, device=x.device)
    for i in range(n - 1):
        d = (x[i + 1 :].to(torch.float32) - x[i].to(torch.float32)).square().sum(1)
        out[i, i + 1 :] = d
        out[i + 1 :, i] = d
    return out


# ---------------------------------------------------------------------------------------------
# CPU: BLAS Gram, split-K with float64 combination, recompute of unreliable pairs
# ---------------------------------------------------------------------------------------------


def _split_gram(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, int]:
    """``(N, K)`` float32 with unit inner stride -> ``((N, N)`` float64 Gram, number of chunks)."""
    n, k = x.shape
    splits = max(1, k // chunk)
    length = k // splits
    main = x[:, : splits * length].unflatten(1, (splits, length)).transpose(0, 1)  # (S, N, L) view
    gram = torch.bmm(main, main.transpose(1, 2)).sum(0, dtype=torch.float64)
    if splits * length < k:  # tail shorter than one chunk
        tail = x[:, splits * length :]
        gram += (tail @ tail.T).to(torch.float64)
    return gram, splits


def _gram_sq(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Gram-derived ``(N, N)`` float64 squared distances, the ``(N, N)`` bool unreliable mask (strict
    lower triangle) and the threshold used."""
    gram, splits = _split_gram(x, chunk)
    norms = gram.diagonal()
    sq = (norms[:, None] + norms[None, :] - 2 * gram).clamp_min(0)
    tau = reliability_threshold(gram_error(x.shape[1], splits, C_CPU))
    lower = torch.ones_like(sq, dtype=torch.bool).tril(-1)
    unreliable = ~(sq >= tau * (norms[:, None] + norms[None, :])) & lower
    return sq, unreliable, tau


def _recompute_pairs(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Direct ``(P,)`` float32 squared distances of the pairs ``(rows[p], cols[p])`` of ``x (N, K)``,
    gathered in groups of at most ~64 MB."""
    from .paired import pair_sq_distances

    per = max(1, (64 << 20) // max(1, 2 * x.shape[1] * x.element_size()))
    parts = [
        pair_sq_distances(x[rows[s : s + per]], x[cols[s : s + per]])
        for s in range(0, rows.numel(), per)
    ]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.float32, device=x.device)


class _Threads:
    """Temporarily runs torch's CPU ops on ``n`` threads (restored on exit)."""

    def __init__(self, n: int | None) -> None:
        self.n, self.prev = n, None

    def __enter__(self) -> None:
        if self.n is not None and torch.get_num_threads() != self.n:
            self.prev = torch.get_num_threads()
            torch.set_num_threads(self.n)

    def __exit__(self, *exc) -> None:
        if self.prev is not None:
            torch.set_num_threads(self.prev)


def _all_pairs_cpu(a: torch.Tensor, chunk: int = CPU_CHUNK) -> torch.Tensor:
    """``(N, K)`` -> ``(N, N)`` float32 via the split-K BLAS Gram (see the module docstring)."""
    small = a.shape[0] ** 2 * a.shape[1] <= CPU_SINGLE_THREAD_MACS
    with _Threads(1 if small else None):
        return _all_pairs_cpu_impl(a, chunk)


PROBE_SLICES, PROBE_WIDTH = 8, 512


def _probe_wants_centring(x: torch.Tensor, chunk: int) -> bool:
    """Whether more than N/2 pairs would be unreliable, judged on ``PROBE_SLICES`` column slices of
    ``PROBE_WIDTH`` spread over K (about ``4096 / K`` of the Gram's cost): then the rows are centred
    before the Gram instead of after a wasted one."""
    n, k = x.shape
    if k < 4 * PROBE_SLICES * PROBE_WIDTH:
        return False  # short rows: a second Gram is cheap, the fallback handles it
    gram = torch.zeros(n, n, dtype=torch.float64)
    for start in torch.linspace(0, k - PROBE_WIDTH, PROBE_SLICES).long().tolist():
        part = x[:, start : start + PROBE_WIDTH]
        gram += (part @ part.T).to(torch.float64)
    norms = gram.diagonal()
    scale = norms[:, None] + norms[None, :]
    tau = reliability_threshold(gram_error(k, max(1, k // chunk), C_CPU))
    low = ((scale - 2 * gram) < 2 * tau * scale).tril(-1)
    return int(low.sum()) > n // 2


def _all_pairs_cpu_impl(a: torch.Tensor, chunk: int) -> torch.Tensor:
    n = a.shape[0]
    x = a.to(torch.float32)
    if x.stride(1) != 1:
        x = x.contiguous()
    with _Threads(1):  # 8 small products: fork/join would cost more than the work
        centred = _probe_wants_centring(x, chunk)
    if centred:
        x = x - x[:1]  # anchor row: one read and one write pass (the mean row would add a read)
    sq, unreliable, _ = _gram_sq(x, chunk)
    if not centred and int(unreliable.sum()) > n // 2:  # the probe missed it
        sq, unreliable, _ = _gram_sq(x - x[:1], chunk)
    out = sq.to(torch.float32)
    rows, cols = unreliable.nonzero(as_tuple=True)
    if rows.numel():
        out[rows, cols] = _recompute_pairs(a, rows, cols)
    out = out.tril(-1)
    return out + out.T


# ---------------------------------------------------------------------------------------------
# the op layer
# ---------------------------------------------------------------------------------------------

BACKENDS = ("auto", "cpu", "torch", "triton")


def _triton_usable(device: torch.device) -> bool:
    from . import triton_all_pairs

    return triton_all_pairs.usable(device)


def _resolve(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        if device.type == "cpu":
            return "cpu"
        return "triton" if device.type == "cuda" and _triton_usable(device) else "torch"
    if backend == "cpu" and device.type != "cpu":
        raise ValueError(f"backend='cpu' runs on cpu tensors, got tensors on {device}")
    if backend == "triton" and not _triton_usable(device):
        raise ValueError(
            f"backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before import for CPU "
            f"tensors) and an importable triton; got tensors on {device}"
        )
    return backend


@torch.library.custom_op("vitplast::all_pair_sq_distances", mutates_args=())
def _all_pair_sq_distances_op(a: torch.Tensor, backend: str) -> torch.Tensor:
    x = a.reshape(a.shape[0], -1)
    if backend == "cpu":
        return _all_pairs_cpu(x)
    if backend == "triton":
        from . import triton_all_pairs

        return triton_all_pairs.all_pair_sq_distances_triton(x)
    return _all_pairs_torch(x)


@_all_pair_sq_distances_op.register_fake
def _(a: torch.Tensor, backend: str) -> torch.Tensor:
    torch._check(a.dim() >= 2, lambda: "a must have at least 2 dims")
    return a.new_empty((a.shape[0], a.shape[0]), dtype=torch.float32)


def all_pair_sq_distances(a: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(N, ...) -> (N, N)`` float32 ``S[i, j] = ||a[i] - a[j]||_F^2``: symmetric, zero diagonal.

    ``a`` is float32, float16 or bfloat16 (any strides); every entry has a relative error <= 1e-5
    against float64, near-duplicate rows included, and identical rows give exactly 0.
    """
    a = _validate.check_tensor("a", a)
    return _all_pair_sq_distances_op(a.detach(), _resolve(backend, a.device))


def all_pair_distances(a: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(N, ...) -> (N, N)`` float32 Frobenius distances ``||a[i] - a[j]||``."""
    return all_pair_sq_distances(a, backend=backend).sqrt()


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
    fx = _validate.check_tensor("fx", fx)
    x = _validate.check_tensor("x", x)
    _validate.check_output_input(fx, x)
    num = all_pair_sq_distances(fx, backend=backend)
    den = all_pair_sq_distances(x, backend=backend)
    return ratios_from_sq_matrices(num, den)
