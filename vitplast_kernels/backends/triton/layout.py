"""Row layouts of the paired Triton kernels (a mirror of csrc/row_layout.h): how a ``(B, ...)`` tensor
is read row by row as runs of contiguous elements, and which views are copied first."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

MIN_SEGMENT = 64  # contiguous runs shorter than this are not worth streaming: copy instead


@dataclass(frozen=True)
class RowLayout:
    batch_stride: int  # elements between consecutive rows
    inner: int  # contiguous elements per inner block
    outer_stride: int  # elements between consecutive inner blocks


def collapse_rows(t: torch.Tensor) -> RowLayout | None:
    """Collapses dims 1.. of ``t`` into (outer, inner) with unit inner stride, or None."""
    sizes, strides = t.shape, t.stride()
    d = t.dim() - 1
    inner = 1
    while d >= 1:
        if sizes[d] != 1:
            if strides[d] != inner:
                break
            inner *= sizes[d]
        d -= 1
    outer_stride = None
    expected = 0
    while d >= 1:
        if sizes[d] != 1:
            if outer_stride is None:
                if inner == 1:
                    return None  # the innermost non-unit dim is not contiguous
                outer_stride = strides[d]
            elif strides[d] != expected:
                return None
            expected = strides[d] * sizes[d]
        d -= 1
    return RowLayout(strides[0] if t.dim() > 0 else 0, inner, inner if outer_stride is None else outer_stride)


@dataclass(frozen=True)
class PairLayout:
    a: torch.Tensor  # possibly a contiguous copy of the input
    b: torch.Tensor
    la: RowLayout
    lb: RowLayout
    rows: int
    row_len: int  # K: logical elements per row

    @property
    def contiguous_rows(self) -> bool:
        return self.la.inner >= self.row_len and self.lb.inner >= self.row_len


def pair_layout(a: torch.Tensor, b: torch.Tensor) -> PairLayout:
    """Layouts for reading ``a`` and ``b`` row by row, copying views that cannot be streamed."""
    rows = a.shape[0]
    row_len = a.numel() // rows if rows else 0
    if rows == 0 or row_len == 0:
        return PairLayout(a, b, RowLayout(0, 1, 1), RowLayout(0, 1, 1), rows, row_len)
    la = collapse_rows(a)
    if la is None:
        a = a.contiguous()
        la = collapse_rows(a)
    lb = collapse_rows(b)
    if lb is None:
        b = b.contiguous()
        lb = collapse_rows(b)
    if math.gcd(la.inner, lb.inner) < min(MIN_SEGMENT, row_len):
        if la.inner < row_len:
            a = a.contiguous()
            la = collapse_rows(a)
        if lb.inner < row_len:
            b = b.contiguous()
            lb = collapse_rows(b)
    return PairLayout(a, b, la, lb, rows, row_len)


_VEC = {torch.float32: 4, torch.float16: 8, torch.bfloat16: 8}  # elements per 16-byte load


def _vec(dtype: torch.dtype) -> int:
    return _VEC[dtype]


def _strides_aligned(layout: RowLayout, row_len: int, vec: int) -> bool:
    """Every run starts a multiple of ``vec`` elements after the data pointer (chunk starts are
    multiples of BLOCK); with a 16-byte aligned pointer, every run starts on a 16-byte boundary."""
    if layout.batch_stride % vec:
        return False
    return layout.inner >= row_len or (layout.inner % vec == 0 and layout.outer_stride % vec == 0)
