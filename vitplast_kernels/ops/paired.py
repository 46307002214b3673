"""Public paired reductions: validate, pick a backend, call it (the thin op layer); the paired custom ops'
fakes and autograd formulas.

Shapes: ``a``, ``b`` are ``(B, ...)``: pair ``i`` is ``(a[i], b[i])``; everything after the leading
dim is one pair member (e.g. ``(B, n, d)`` tokens x channels). Inputs may be float32, float16 or
bfloat16, contiguous or strided views; differences are taken after up-casting. float64 inputs run on the
PyTorch path (backend ``"torch"``, which ``"auto"`` picks for them; the kernels take the other three) and
give float64 distances and rates, differentiable through torch itself (gradcheck-able).

Range: every backend returns the float64 sums of squares (a float32 square overflows above 2^64 and
vanishes below 2^-75, far inside float32's range), and distances and rates are formed from them in
float64 before the cast to float32: they are right wherever their true value is a finite float32 number
(activations scaled by 1e30 or by 1e-38 included). ``pair_sq_distances`` returns the squares as
float32 (inf above 3.4e38, 0 below 1.4e-45, as float32 has it); the measurement layer takes the float64
sums from `pair_sq_sums` and `grouped_sq_sums`.

Gradients: the outputs are differentiable in ``a`` and ``b`` (autograd formulas registered below for the
C++ and Triton ops; the ``torch`` backend differentiates through torch itself):
``d/da sum_k (a_k - b_k)^2 = 2 (a - b)``, times the upstream gradient, formed in the upstream gradient's
precision (float64 from the float64 sums) and returned in the inputs' dtype. Inputs that do not
require grad (capture detaches what it measures) build no graph and save nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import environment
from ..backends import resolve
from ..backends.dispatch import without_autograd
from ..backends.extension import cpu_extension_available
from . import validate

# Under torch.compile, backend="auto" may hand the reduction to the compiler as plain tensor code
# (up-cast, subtract, square and sum in float64), so that Inductor fuses it into the kernels that
# produce the activations instead of reading them again; eager calls always use the hand-written
# kernels. Default: on every device. On CUDA Inductor fuses the reduction into the kernels that produce
# its inputs; on CPU the compiled step with the reduction left to Inductor is faster than with the custom
# op too (bench.compile_monitor compares the two).
# VITPLAST_COMPILED_REDUCTION=inductor|kernel forces one choice on every device (read when a call is
# traced, never at import); COMPILED_REDUCTION, when set in this process, takes its place.
COMPILED_REDUCTION: str | None = None


@torch.compiler.assume_constant_result  # read once while torch.compile traces, not traced
def _compiled_reduction_env() -> str:
    return environment.choice(environment.COMPILED_REDUCTION) or ""


def compiler_reduces(backend: str, device: torch.device) -> bool:
    """Whether this call, traced by torch.compile, is left to the compiler (see above)."""
    if backend != "auto" or not torch.compiler.is_compiling():
        return False
    chosen = COMPILED_REDUCTION or _compiled_reduction_env()
    if chosen:
        return chosen == "inductor"
    return True


def decomposed_sq_sums(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(B, ...) x (B, ...) -> (B,)`` float64 sums as plain tensor code (what the compiler fuses): the
    up-cast comes before the difference, as in the kernels."""
    wide = torch.float64 if a.dtype == torch.float64 else torch.float32
    d = a.to(wide) - b.to(wide)
    return d.to(torch.float64).square().flatten(1).sum(1)


def call_backend(fn, a, b, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``fn(a, b)``, below the autograd dispatch key when `without_autograd` allows it (the result
    is the same tensor the autograd path returns for inputs that need no gradient)."""
    if without_autograd(tensors):
        with torch._C._AutoDispatchBelowAutograd():
            return fn(a, b)
    return fn(a, b)


def pair_sq_sums(a: torch.Tensor, b: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(B, ...) x (B, ...) -> (B,)`` float64 ``sum_k (a[i, k] - b[i, k])^2`` (the backends' sums)."""
    a, b = validate.check_pair("a", a, "b", b)
    if compiler_reduces(backend, a.device):
        return decomposed_sq_sums(a, b)
    return call_backend(resolve(backend, a.device, dtype=a.dtype).pair_sq, a, b, (a, b))


def pair_sq_distances(a: torch.Tensor, b: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(B, ...) x (B, ...) -> (B,)`` float32 (float64 for float64 inputs): ``sum_k (a[i, k] - b[i, k])^2``
    per pair ``i``."""
    return pair_sq_sums(a, b, backend=backend).to(validate.result_dtype(a))


def pair_distances(a: torch.Tensor, b: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``(B, ...) x (B, ...) -> (B,)`` float32 (float64 for float64 inputs) distances ``||a[i] - b[i]||``."""
    return sqrt0(pair_sq_sums(a, b, backend=backend)).to(validate.result_dtype(a))


def pair_ratios(
    fx: torch.Tensor, fy: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, backend: str = "auto"
) -> torch.Tensor:
    """``(B,)`` float32 rates ``||fx[i] - fy[i]|| / ||x[i] - y[i]||``; NaN where ``x[i] == y[i]``.

    ``fx``/``fy`` are the component's outputs for the pair members ``x``/``y``; the outputs and the
    inputs may have different shapes but must hold the same number of pairs ``B``.
    """
    fx, fy = validate.check_pair("fx", fx, "fy", fy)
    x, y = validate.check_pair("x", x, "y", y)
    validate.check_output_input(fx, x)
    num = pair_sq_sums(fx, fy, backend=backend)
    den = pair_sq_sums(x, y, backend=backend)
    return ratio_from_sq(num, den).to(torch.promote_types(validate.result_dtype(fx),
                                                          validate.result_dtype(x)))


def ratio_from_sq(num_sq: torch.Tensor, den_sq: torch.Tensor) -> torch.Tensor:
    """``sqrt(num_sq / den_sq)`` with NaN where ``den_sq == 0`` (identical inputs: no rate)."""
    if num_sq.shape != den_sq.shape:
        raise ValueError(
            f"num_sq and den_sq must have the same shape, got {tuple(num_sq.shape)} and {tuple(den_sq.shape)}"
        )
    distinct = den_sq > 0
    # the excluded pairs divide by 1, not 0: their (unused) gradient stays finite instead of NaN
    rate = sqrt0(num_sq / torch.where(distinct, den_sq, 1.0))
    return torch.where(distinct, rate, float("nan"))


def sqrt0(s: torch.Tensor) -> torch.Tensor:
    """``s.sqrt()`` (same values) whose gradient is 0 where ``s == 0``: a subgradient of the norm at 0,
    where sqrt's own gradient is infinite and turns even a zero upstream gradient into NaN (the
    all-pairs diagonal, identical pairs)."""
    if not s.requires_grad:
        return s.sqrt()
    zero = s == 0
    return torch.where(zero, 0.0, torch.where(zero, 1.0, s).sqrt())


def grouped_sq_sums(
    a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], *, backend: str = "auto"
) -> torch.Tensor:
    """G pairs of ``(B, ...)`` tensors -> ``(G, B)`` float64 sums (see `pair_sq_distances_grouped`)."""
    for name, group in (("a", a), ("b", b)):
        if isinstance(group, torch.Tensor):
            raise TypeError(
                f"{name} must be a sequence of tensors (one per group member), got a single tensor of shape "
                f"{tuple(group.shape)}: use pair_sq_distances for one pair of tensors"
            )
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"a and b must hold as many tensors, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("a and b are empty: the group must hold at least one pair of tensors")
    if not validate.group_is_valid(a, b):  # the per-tensor checks raise, naming the offender
        for g, (x, y) in enumerate(zip(a, b, strict=True)):
            validate.check_pair(f"a[{g}]", x, f"b[{g}]", y)
        names = [f"a[{g}]" for g in range(len(a))]
        validate.check_rows(names, a)
        validate.check_same(names, a, same_shape=False)
    if compiler_reduces(backend, a[0].device):
        return torch.stack([decomposed_sq_sums(x, y) for x, y in zip(a, b, strict=True)])
    return call_backend(resolve(backend, a[0].device, dtype=a[0].dtype).grouped, a, b, (*a, *b))


def halves_sq_sums(tensors: Sequence[torch.Tensor], *, backend: str = "auto") -> torch.Tensor:
    """``G`` tensors ``(2B, ...)`` of one dtype and device -> ``(G, B)`` float64 sums of squared
    differences of rows ``i`` and ``i + B``: ``grouped_sq_sums([t[:B] ...], [t[B:] ...])``, the
    capture's call on every hook. In eager mode the checks run once per tensor rather than per half;
    the backend is resolved on every call, as every op resolves it (``VITPLAST_*`` variables are read
    when used); anything else (a tensor that fails a check, a traced call) takes `grouped_sq_sums`
    itself, whose errors name the offending tensor."""
    first = tensors[0]
    n = first.shape[0] if isinstance(first, torch.Tensor) and first.dim() >= 2 else 0
    half = n // 2
    if torch.compiler.is_compiling() or n < 2 or n % 2 or not validate.group_is_valid(tensors, tensors):
        return grouped_sq_sums([t[:half] for t in tensors], [t[half:] for t in tensors], backend=backend)
    chosen = resolve(backend, first.device, dtype=first.dtype)
    halves = [t.chunk(2) for t in tensors]  # (t[:B], t[B:]): the same two views in one call
    return call_backend(chosen.grouped, [h[0] for h in halves], [h[1] for h in halves], tensors)


def pair_sq_distances_grouped(
    a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], *, backend: str = "auto"
) -> torch.Tensor:
    """G pairs of ``(B, ...)`` tensors (widths may differ, ``B`` shared) -> ``(G, B)`` float32.

    One launch for the whole group on GPU backends: what a capture uses to reduce every tensor of a
    forward pass at once.
    """
    return grouped_sq_sums(a, b, backend=backend).to(validate.result_dtype(a[0]))


# ---------------------------------------------------------------------------------------------
# autograd formulas of the paired custom ops


def pair_sq_grad(a: torch.Tensor, b: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Gradient in ``a`` of ``sum_i grad[i] * sum_k (a[i, k] - b[i, k])^2``: ``2 (a - b) grad[i]``,
    formed in float64 when ``grad`` is (float32 otherwise), returned in ``a``'s dtype (the gradient in
    ``b`` is its negation)."""
    wide = torch.float64 if grad.dtype == torch.float64 else torch.float32
    d = a.to(wide) - b.to(wide)
    return (d * (2 * grad.to(wide)).reshape((-1,) + (1,) * (a.dim() - 1))).to(a.dtype)


def setup_pair_sq(ctx, inputs, output) -> None:
    a, b = inputs
    ctx.save_for_backward(a, b)


def pair_sq_backward(ctx, grad: torch.Tensor):
    a, b = ctx.saved_tensors
    ga = pair_sq_grad(a, b, grad)
    return ga, -ga


def setup_grouped(ctx, inputs, output) -> None:
    a, b = inputs
    ctx.groups = len(a)
    ctx.wanted = [x.requires_grad or y.requires_grad for x, y in zip(a, b, strict=True)]
    ctx.save_for_backward(*a, *b)


def grouped_backward(ctx, grad: torch.Tensor):
    saved = ctx.saved_tensors
    a, b = saved[: ctx.groups], saved[ctx.groups :]
    ga: list[torch.Tensor | None] = [None] * ctx.groups
    for g in range(ctx.groups):
        if ctx.wanted[g]:
            ga[g] = pair_sq_grad(a[g], b[g], grad[g])
    return ga, [None if t is None else -t for t in ga]


# ---------------------------------------------------------------------------------------------
# fakes of the paired custom ops
#
# The one place for the paired ops' fakes and autograd formulas: every ``vitplast::`` op is defined by its
# backend (the C++ ops by their schemas in csrc/ops_registration.cpp, the Triton twins by
# ``torch.library.custom_op`` in backends/triton/ops.py: backends own the kernels) and gets its fake and
# autograd formula here, registered by name with ``torch.library.register_fake`` /
# ``register_autograd``; the two paired ops share them with their Triton twins. The all-pairs op
# (``vitplast::all_pair_sq_distances``, defined in ops/all_pairs.py) is registered the same way there.


def pair_sq_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch._check(a.dim() >= 2, lambda: "a must have at least 2 dims")
    torch._check(a.shape == b.shape, lambda: "a and b must have the same shape")
    return a.new_empty((a.shape[0],), dtype=torch.float64)


def grouped_fake(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    torch._check(len(a) == len(b) and len(a) > 0, lambda: "a and b must hold as many tensors")
    return a[0].new_empty((len(a), a[0].shape[0]), dtype=torch.float64)


# the C++ ops exist once the extension has loaded; the Triton ops always (defined when backends import)
_CPP = cpu_extension_available()
PAIR_OPS = ("vitplast::pair_sq_distances",) * _CPP + ("vitplast::pair_sq_distances_triton",)
GROUPED_OPS = (("vitplast::pair_sq_distances_grouped",) * _CPP
               + ("vitplast::pair_sq_distances_grouped_triton",))
for _name in PAIR_OPS:
    torch.library.register_fake(_name, pair_sq_fake)
    torch.library.register_autograd(_name, pair_sq_backward, setup_context=setup_pair_sq)
for _name in GROUPED_OPS:
    torch.library.register_fake(_name, grouped_fake)
    torch.library.register_autograd(_name, grouped_backward, setup_context=setup_grouped)
