"""Input validation for the public ops: errors name the argument and the problem."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..numerics import KERNEL_DTYPES

# float64 runs on the PyTorch path (backend "torch", what "auto" picks for it): exact, and differentiable
# by torch itself; the hand-written kernels take the three 16/32-bit types (KERNEL_DTYPES).
SUPPORTED_DTYPES = (*KERNEL_DTYPES, torch.float64)


def dtype_problem(name: str, dtype: torch.dtype) -> str:
    """The error text for an activation of an unsupported dtype."""
    if dtype.is_complex:
        why = (" (complex activations are not compared: pass torch.view_as_real(t), whose real and "
               "imaginary parts count as two channels of a real distance)")
    elif not dtype.is_floating_point:
        why = " (integer activations cannot be compared)"
    else:
        why = ""
    return f"{name} must be float32, float16, bfloat16 or float64, got {dtype}{why}"


def device_problem(name: str) -> str:
    """The error text for an activation without data (on the ``meta`` device). Fake tensors, which
    tracing (``torch.compile``, ``FakeTensorMode``, ``opcheck``) passes, report the device they stand
    for and are not refused; the ops' fake kernels take meta tensors when called directly."""
    return (f"{name} is on the meta device: it holds no data, so there is nothing to compare (move it to "
            "a real device with its values, e.g. a model built under torch.device('meta') needs its "
            "weights loaded first)")


def result_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype of the ops' distances and rates: float64 for float64 inputs, float32 otherwise."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def check_tensor(name: str, t: object, *, min_dims: int = 2) -> torch.Tensor:
    """Checks one activation tensor of shape (B, ...) with B >= 1 and a floating dtype."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(dtype_problem(name, t.dtype))
    if t.device.type == "meta":
        raise ValueError(device_problem(name))
    if t.dim() < min_dims:
        raise ValueError(
            f"{name} must have at least {min_dims} dims (B, ...): pairs first, then the elements of each "
            f"pair member; got shape {tuple(t.shape)}"
        )
    if t.shape[0] == 0:
        raise ValueError(f"{name} has an empty batch (shape {tuple(t.shape)}): there are no pairs")
    return t


def check_same(names: Sequence[str], tensors: Sequence[torch.Tensor], *, same_shape: bool = True) -> None:
    """Checks that tensors agree on device, dtype and (optionally) shape; names the offender."""
    first_name, first = names[0], tensors[0]
    for name, t in zip(names[1:], tensors[1:], strict=True):
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}")
        if t.dtype != first.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but {first_name} has dtype {first.dtype}")
        if same_shape and t.shape != first.shape:
            raise ValueError(
                f"{name} must have the same shape as {first_name}, got {tuple(t.shape)} and "
                f"{tuple(first.shape)}"
            )


def check_pair(a_name: str, a: object, b_name: str, b: object) -> tuple[torch.Tensor, torch.Tensor]:
    a = check_tensor(a_name, a)
    b = check_tensor(b_name, b)
    check_same([a_name, b_name], [a, b])
    return a, b


def group_is_valid(a: Sequence[object], b: Sequence[object]) -> bool:
    """One quick pass over a group (per call, 2 x 160 tensors for a ViT-H forward): True when every
    ``a[g]``, ``b[g]`` is a supported tensor of >= 2 dims, all share a[0]'s dtype, device and non-zero
    row count, and ``b[g]`` has ``a[g]``'s shape. False sends the caller to the per-tensor checks, which
    name the offender."""
    first = a[0]
    if not isinstance(first, torch.Tensor) or first.dtype not in SUPPORTED_DTYPES or first.dim() < 2:
        return False
    dtype, device, rows = first.dtype, first.device, first.shape[0]
    if rows == 0 or device.type == "meta":
        return False
    for x, y in zip(a, b, strict=True):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            return False
        shape = x.shape
        if (x.dtype != dtype or y.dtype != dtype or len(shape) < 2 or shape[0] != rows or y.shape != shape
                or x.device != device or y.device != device):
            return False
    return True


def check_rows(names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
    """Checks that tensors share the leading (pair) dimension."""
    rows = tensors[0].shape[0]
    for name, t in zip(names, tensors, strict=True):
        if t.shape[0] != rows:
            raise ValueError(
                f"{name} has {t.shape[0]} rows but {names[0]} has {rows}: every tensor must hold the "
                "same pairs"
            )


def check_output_input(fx: torch.Tensor, x: torch.Tensor) -> None:
    """A component's outputs ``fx`` and inputs ``x`` must hold the same sequences, on one device
    (their other dims may differ)."""
    check_rows(["fx", "x"], [fx, x])
    if fx.device != x.device:
        raise ValueError(f"x is on {x.device} but fx is on {fx.device}")
