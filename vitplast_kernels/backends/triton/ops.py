"""``backend="triton"``: the Triton paired reductions as ``torch.library`` custom ops.

``vitplast::pair_sq_distances_triton(Tensor a, Tensor b) -> Tensor``: ``(B, ...) x (B, ...) -> (B,)``
float64; ``vitplast::pair_sq_distances_grouped_triton(Tensor[] a, Tensor[] b) -> Tensor``: ``(G, B)``
float64 (the float64 sums, as the C++ ops return them). Their fakes and autograd formulas are the C++
ops', registered in ``ops/paired.py`` (the one place for every op's), so ``torch.compile(fullgraph=True)``
traces through them and ``torch.library.opcheck`` passes. Eager calls on plain tensors
that need no gradient (`without_autograd`) skip the op's
dispatch and call the launchers directly (same kernels, same results); traced calls and calls on
tensors requiring grad go through the ops. The backend runs on CUDA tensors, and on CPU tensors too
when ``TRITON_INTERPRET=1`` (Triton's interpreter: how CI tests the kernels without a GPU).
"""

from __future__ import annotations

import importlib.util
import os

import torch

from ..dispatch import without_autograd
from ..registry import Backend, register_backend

# fixed at import, like the kernels' interpreter switch (plain constants: torch.compile traces them)
_HAVE_TRITON = importlib.util.find_spec("triton") is not None
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _interpreting() -> bool:
    return _INTERPRET


def triton_available() -> bool:
    """True when Triton is importable and can run here (a CUDA device, or the interpreter)."""
    return _HAVE_TRITON and (_INTERPRET or torch.cuda.is_available())


def require_triton() -> None:
    if not _HAVE_TRITON:
        raise RuntimeError("backend='triton' needs the `triton` package (pip install triton)")
    if not (_INTERPRET or torch.cuda.is_available()):
        raise RuntimeError(
            "backend='triton' needs a CUDA device (or TRITON_INTERPRET=1 set before import to run "
            "Triton's interpreter on CPU tensors, slowly)"
        )


@torch.library.custom_op("vitplast::pair_sq_distances_triton", mutates_args=())
def pair_sq_distances_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(B, ...) x (B, ...) -> (B,)`` float64 squared distances per pair (Triton)."""
    from . import paired as triton_paired

    return triton_paired.pair_sq_distances(a, b)


@torch.library.custom_op("vitplast::pair_sq_distances_grouped_triton", mutates_args=())
def pair_sq_distances_grouped_triton(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    """G pairs of ``(B, ...)`` tensors -> ``(G, B)`` float64, one launch per stage (Triton)."""
    from . import paired as triton_paired

    return triton_paired.pair_sq_distances_grouped(a, b)


def _direct(*tensors: torch.Tensor) -> bool:
    """True when a call can skip the custom-op machinery: it needs no autograd (`without_autograd`:
    eager, no gradient asked of any input) and its tensors are plain ones (not FakeTensors or other
    subclasses, which need the op's fake implementation; the first one stands for all)."""
    return without_autograd(tensors) and type(tensors[0]) is torch.Tensor


def _pair_sq(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if _direct(a, b):  # straight to the launcher, without the op's dispatch
        from . import paired as triton_paired

        return triton_paired.pair_sq_distances(a, b)
    return torch.ops.vitplast.pair_sq_distances_triton(a, b)


def _grouped(a, b) -> torch.Tensor:
    if _direct(*a, *b):
        from . import paired as triton_paired

        return triton_paired.pair_sq_distances_grouped(a, b)
    return torch.ops.vitplast.pair_sq_distances_grouped_triton(list(a), list(b))


def _all_pairs(x: torch.Tensor) -> torch.Tensor:
    from . import all_pairs

    return all_pairs.all_pair_sq_sums_triton(x)


register_backend(
    Backend(
        "triton",
        ("cuda", "cpu") if _interpreting() else ("cuda",),
        triton_available,
        require_triton,
        _pair_sq,
        _grouped,
        all_pairs=_all_pairs,
    )
)
