"""Triton kernels for the paired reductions, one tensor pair or a group of them, and their launchers.

``pair_sq_distances(a, b)``: ``(B, ...) x (B, ...) -> (B,)`` float64 ``sum_k (a[i,k] - b[i,k])^2``.
``pair_sq_distances_grouped(as_, bs)``: G pairs of ``(B, ...)`` tensors of any widths (same dtype,
device and ``B``) -> ``(G, B)`` float64, in one launch per stage.

Inputs are float32, float16 or bfloat16. Squares and sums are float64, so that every square of a float32
difference is representable (float32 squares overflow above 2^64 and vanish below 2^-75: activations
scaled by 1e30 or 1e-30 would give inf or 0); float32 inputs are widened before the difference (exact),
16-bit inputs are subtracted in float32 (exact but for operands more than 2^24 apart) and the
difference widened. The outputs are the float64 sums (the op layer casts).

Work is cut into tasks (tensor g, row, chunk of whole ``BLOCK``s of logical elements) so that even
B = 32 rows fill a large GPU. Stage 1: one program per task sums ``(a - b)^2`` in float64 lanes and
writes one float64 partial per task. Stage 2: one program per output ``(g, row)`` sums that row's
partials in float64, in a fixed order. No atomics: results are bitwise repeatable. The chunk size of a
tensor depends only on its own ``(B, K)``, so a tensor is cut the same way alone or in a group, and
each program sums its lanes by a fixed pairwise tree (``_tree_sum``), whatever lane layout the compiler
picks for that launch: a tensor gives the same bits alone and in any group.

Layouts (mirror of csrc/row_layout.h): a tensor is read in place when its non-batch dims collapse to
``(outer, inner-contiguous)``; rows that are contiguous take a vectorised path, other collapsible
layouts a per-element ``(k // inner) * outer_stride + k % inner`` path. Anything else (e.g. a
transposed last dim) is copied once with ``.contiguous()`` (documented fallback).

Grouped launch: pointers are passed as int64 element offsets from the group's lowest data pointer
(``base``), which avoids integer-to-pointer casts and works the same under ``TRITON_INTERPRET=1``.
Per-tensor layout tables are cached by the group's signature (shapes, strides, dtype, device); only
the offsets table is built per call, copied host -> device with ``non_blocking=True`` from pinned
memory: the launch path never synchronises with the device. All index arithmetic is int64.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .layout import MIN_SEGMENT, PairLayout, RowLayout, _strides_aligned, _vec, collapse_rows, pair_layout  # noqa: F401

BLOCK = 4096  # logical elements per loop step of a program (chunks are whole BLOCKs)
TARGET_TASKS = 2048  # tasks aimed at per tensor: fills a 132-SM GPU even at B = 32
MIN_BLOCKS_PER_CHUNK = 4  # per-program prologue (layout loads) amortised over >= 16K elements
MAX_BLOCKS_PER_CHUNK = 16
STAGE1_WARPS = 8
STAGE2_BLOCK = 128
STAGE2_WARPS = 4

# per-tensor layout table columns (int64)
_A_BS, _A_INNER, _A_OS, _B_BS, _B_INNER, _B_OS, _K, _NCHUNKS, _CHUNK, _TASK0, _CONTIG = range(11)
_NCOL = 11


# ---------------------------------------------------------------------------------------------
# kernels


@triton.jit
def _tree_sum(x, N: tl.constexpr):
    """Sum of the ``N`` (a power of two) elements of ``x`` by a fixed pairwise tree: ``x[2i] + x[2i+1]``,
    halving until one is left. Each step adds exactly two numbers, and ``a + b == b + a``, so the
    result does not depend on how the compiler spreads ``x`` over threads (``tl.sum``'s order does:
    the vector width the alignment allows changes it). Same bits in every kernel that sums the same
    lanes: the single and the grouped launch, aligned or not."""
    for i in tl.static_range(16):
        if (N >> i) > 1:
            x = tl.sum(tl.reshape(x, (N >> (i + 1), 2)), axis=1)
    return tl.sum(x, axis=0)


@triton.jit
def _sq(x, y):
    """(x - y)^2 in float64 (see the module docstring for where the difference is taken)."""
    if x.dtype == tl.float32:
        d = x.to(tl.float64) - y.to(tl.float64)
    else:
        d = (x.to(tl.float32) - y.to(tl.float32)).to(tl.float64)
    return d * d


@triton.jit
def _quarter(v, BLOCK: tl.constexpr):
    """The ``BLOCK`` squares of a step summed in fixed pairs, twice: ``BLOCK / 4`` float64 lanes. Each
    add takes exactly two numbers, so the lanes do not depend on the compiler's layout, and the
    accumulator holds a quarter of the float64 registers (sm_90: 40-64 registers per thread instead of
    64-80, bench/codegen_sm90.py)."""
    v = tl.sum(tl.reshape(v, (BLOCK // 2, 2)), axis=1)
    return tl.sum(tl.reshape(v, (BLOCK // 4, 2)), axis=1)


@triton.jit
def _sq_contig(a_ptr, b_ptr, a_row, b_row, k0, k1, ALIGNED: tl.constexpr, VEC: tl.constexpr,
               BLOCK: tl.constexpr):
    """``BLOCK / 4`` float64 lanes of sum (a - b)^2 over logical elements [k0, k1) of contiguous rows."""
    acc = tl.zeros([BLOCK // 4], dtype=tl.float64)
    lanes = tl.arange(0, BLOCK)
    full = (k1 - k0) // BLOCK
    for i in range(0, full):
        k = k0 + i * BLOCK  # k0 is a multiple of BLOCK
        oa = a_row + k + lanes
        ob = b_row + k + lanes
        if ALIGNED:  # row starts are multiples of VEC: 16-byte vector loads
            oa = tl.multiple_of(oa, VEC)
            ob = tl.multiple_of(ob, VEC)
        acc += _quarter(_sq(tl.load(a_ptr + oa), tl.load(b_ptr + ob)), BLOCK)
    k = k0 + full * BLOCK
    idx = k + lanes
    m = idx < k1
    acc += _quarter(_sq(tl.load(a_ptr + a_row + idx, mask=m, other=0.0),
                        tl.load(b_ptr + b_row + idx, mask=m, other=0.0)), BLOCK)
    return acc


@triton.jit
def _sq_strided(a_ptr, b_ptr, a_row, b_row, k0, k1, a_inner, a_os, b_inner, b_os, BLOCK: tl.constexpr):
    """Same over rows made of runs: logical element k sits at (k // inner) * outer_stride + k % inner."""
    acc = tl.zeros([BLOCK // 4], dtype=tl.float64)
    lanes = tl.arange(0, BLOCK)
    for k in range(k0, k1, BLOCK):
        idx = k + lanes
        m = idx < k1
        oa = (idx // a_inner) * a_os + idx % a_inner
        ob = (idx // b_inner) * b_os + idx % b_inner
        acc += _quarter(_sq(tl.load(a_ptr + a_row + oa, mask=m, other=0.0),
                            tl.load(b_ptr + b_row + ob, mask=m, other=0.0)), BLOCK)
    return acc


@triton.jit
def _stage1_single(a_ptr, b_ptr, partial_ptr, K, nchunks, chunk, a_bs, a_inner, a_os, b_bs, b_inner,
                   b_os, CONTIG: tl.constexpr, ALIGNED: tl.constexpr, VEC: tl.constexpr,
                   BLOCK: tl.constexpr):
    task = tl.program_id(0).to(tl.int64)
    row = task // nchunks
    k0 = (task - row * nchunks) * chunk
    k1 = tl.minimum(k0 + chunk, K)
    a_row = row * a_bs
    b_row = row * b_bs
    if CONTIG:
        acc = _sq_contig(a_ptr, b_ptr, a_row, b_row, k0, k1, ALIGNED, VEC, BLOCK)
    else:
        acc = _sq_strided(a_ptr, b_ptr, a_row, b_row, k0, k1, a_inner, a_os, b_inner, b_os, BLOCK)
    tl.store(partial_ptr + task, _tree_sum(acc, BLOCK // 4))


@triton.jit
def _stage1_grouped(base_ptr, offsets_ptr, layout_ptr, task_group_ptr, partial_ptr,
                    NCOL: tl.constexpr, ALIGNED: tl.constexpr, VEC: tl.constexpr, BLOCK: tl.constexpr,
                    STRIDED: tl.constexpr):
    """STRIDED=False: every tensor of the group has contiguous rows and only the vector path is
    compiled (sm_90, bf16: 48 registers instead of 218 with the strided path's int64 div/mod beside it,
    i.e. 5 resident 8-warp programs per SM instead of 1; bench/codegen_sm90.py)."""
    task = tl.program_id(0).to(tl.int64)
    g = tl.load(task_group_ptr + task).to(tl.int64)
    lay = layout_ptr + g * NCOL
    a_bs = tl.load(lay + 0)
    a_inner = tl.load(lay + 1)
    a_os = tl.load(lay + 2)
    b_bs = tl.load(lay + 3)
    b_inner = tl.load(lay + 4)
    b_os = tl.load(lay + 5)
    K = tl.load(lay + 6)
    nchunks = tl.load(lay + 7)
    chunk = tl.load(lay + 8)
    task0 = tl.load(lay + 9)
    contig = tl.load(lay + 10)
    local = task - task0
    row = local // nchunks
    k0 = (local - row * nchunks) * chunk
    k1 = tl.minimum(k0 + chunk, K)
    a_row = tl.load(offsets_ptr + 2 * g) + row * a_bs
    b_row = tl.load(offsets_ptr + 2 * g + 1) + row * b_bs
    if STRIDED:
        if contig != 0:
            acc = _sq_contig(base_ptr, base_ptr, a_row, b_row, k0, k1, ALIGNED, VEC, BLOCK)
        else:
            acc = _sq_strided(base_ptr, base_ptr, a_row, b_row, k0, k1, a_inner, a_os, b_inner, b_os,
                              BLOCK)
    else:
        acc = _sq_contig(base_ptr, base_ptr, a_row, b_row, k0, k1, ALIGNED, VEC, BLOCK)
    tl.store(partial_ptr + task, _tree_sum(acc, BLOCK // 4))


@triton.jit
def _stage2(partial_ptr, out_ptr, rows, layout_ptr, nchunks_single, GROUPED: tl.constexpr,
            NCOL: tl.constexpr, BLOCK: tl.constexpr):
    """out[o] = sum in float64, fixed order, of the partials of output o = g * rows + row."""
    o = tl.program_id(0).to(tl.int64)
    if GROUPED:
        g = o // rows
        row = o - g * rows
        nchunks = tl.load(layout_ptr + g * NCOL + 7)
        first = tl.load(layout_ptr + g * NCOL + 9) + row * nchunks
    else:
        nchunks = nchunks_single
        first = o * nchunks
    acc = tl.zeros([BLOCK], dtype=tl.float64)
    lanes = tl.arange(0, BLOCK)
    for c in range(0, nchunks, BLOCK):
        idx = c + lanes
        acc += tl.load(partial_ptr + first + idx, mask=idx < nchunks, other=0.0)
    tl.store(out_ptr + o, _tree_sum(acc, BLOCK))


# ---------------------------------------------------------------------------------------------
# plans

def chunk_size(rows: int, row_len: int) -> int:
    """Logical elements per task: whole BLOCKs, enough tasks to fill the GPU, 4 to 16 BLOCKs
    (fewer when the row is shorter)."""
    blocks = max(1, triton.cdiv(row_len, BLOCK))
    per_row = triton.cdiv(TARGET_TASKS, max(rows, 1))
    want = max(triton.cdiv(blocks, per_row), min(blocks, MIN_BLOCKS_PER_CHUNK))
    return BLOCK * min(want, MAX_BLOCKS_PER_CHUNK)


@dataclass(frozen=True)
class _PairPlan:
    """What a pair's layout decides, cached by (shapes, strides, dtype): pointers are not part of it."""

    copy_a: bool  # the view cannot be streamed: copied with .contiguous() on every call
    copy_b: bool
    la: RowLayout
    lb: RowLayout
    rows: int
    row_len: int
    contiguous_rows: bool
    chunk: int
    nchunks: int
    strides_aligned: bool  # alignment up to the data pointers (checked per call)


_PAIR_PLANS: OrderedDict[tuple, _PairPlan] = OrderedDict()
_PAIR_PLAN_CACHE_SIZE = 1024


def _pair_key(a: torch.Tensor, b: torch.Tensor) -> tuple:
    return (a.shape, a.stride(), b.shape, b.stride(), a.dtype)


def _pair_plan(a: torch.Tensor, b: torch.Tensor, key: tuple | None = None) -> _PairPlan:
    key = _pair_key(a, b) if key is None else key
    plan = _PAIR_PLANS.get(key)
    if plan is not None:
        return plan
    p = pair_layout(a, b)
    vec = _vec(a.dtype)
    chunk = chunk_size(p.rows, p.row_len)
    plan = _PairPlan(
        copy_a=p.a is not a, copy_b=p.b is not b, la=p.la, lb=p.lb, rows=p.rows, row_len=p.row_len,
        contiguous_rows=p.contiguous_rows, chunk=chunk, nchunks=triton.cdiv(max(p.row_len, 1), chunk),
        strides_aligned=_strides_aligned(p.la, p.row_len, vec) and _strides_aligned(p.lb, p.row_len, vec),
    )
    _PAIR_PLANS[key] = plan
    if len(_PAIR_PLANS) > _PAIR_PLAN_CACHE_SIZE:
        _PAIR_PLANS.popitem(last=False)
    return plan


# ---------------------------------------------------------------------------------------------
# launchers


def pair_sq_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(B, ...) x (B, ...) -> (B,)`` float64 on a's device (inputs validated by the op layer)."""
    p = _pair_plan(a, b)
    out = torch.empty((p.rows,), dtype=torch.float64, device=a.device)
    if p.rows == 0:
        return out
    if p.row_len == 0:
        return out.zero_()
    if p.copy_a:
        a = a.contiguous()
    if p.copy_b:
        b = b.contiguous()
    partial = torch.empty((p.rows * p.nchunks,), dtype=torch.float64, device=a.device)
    aligned = p.strides_aligned and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0
    _stage1_single[(p.rows * p.nchunks,)](
        a, b, partial, p.row_len, p.nchunks, p.chunk,
        p.la.batch_stride, p.la.inner, p.la.outer_stride, p.lb.batch_stride, p.lb.inner, p.lb.outer_stride,
        CONTIG=p.contiguous_rows, ALIGNED=aligned, VEC=_vec(a.dtype), BLOCK=BLOCK, num_warps=STAGE1_WARPS,
    )
    _stage2[(p.rows,)](partial, out, p.rows, partial, p.nchunks, GROUPED=False, NCOL=_NCOL,
                       BLOCK=STAGE2_BLOCK, num_warps=STAGE2_WARPS)
    return out


@dataclass
class _GroupPlan:
    layout: torch.Tensor  # (G, NCOL) int64 on the device
    task_group: torch.Tensor  # (tasks,) int32 on the device: task -> g
    tasks: int
    rows: int
    copies: tuple[int, ...]  # indices into [a0, b0, a1, b1, ...] copied with .contiguous() per call
    live: tuple[int, ...]  # indices of non-empty tensors (empty ones are never read: offset 0)
    strides_aligned: bool
    strided: bool  # some non-empty tensor is read on the strided path (not contiguous rows)


_PLANS: OrderedDict[tuple, _GroupPlan] = OrderedDict()
_PLAN_CACHE_SIZE = 64


def _plan(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], device: torch.device) -> _GroupPlan:
    """The group's plan, cached by its signature (shapes, strides, dtype, device)."""
    keys = tuple(_pair_key(x, y) for x, y in zip(a, b, strict=True))
    key = (device, keys)
    plan = _PLANS.get(key)
    if plan is not None:
        _PLANS.move_to_end(key)
        return plan
    table, counts, copies, live = [], [], [], []
    tasks = 0
    strides_aligned = True
    strided = False
    for g, (x, y, k) in enumerate(zip(a, b, keys, strict=True)):
        p = _pair_plan(x, y, k)
        table.append([p.la.batch_stride, p.la.inner, p.la.outer_stride, p.lb.batch_stride, p.lb.inner,
                      p.lb.outer_stride, p.row_len, p.nchunks, p.chunk, tasks, int(p.contiguous_rows)])
        counts.append(p.rows * p.nchunks)
        tasks += p.rows * p.nchunks
        copies += [i for i, c in ((2 * g, p.copy_a), (2 * g + 1, p.copy_b)) if c]
        if p.rows and p.row_len:
            live += [2 * g, 2 * g + 1]
            strides_aligned = strides_aligned and p.strides_aligned
            strided = strided or not p.contiguous_rows
    layout = torch.tensor(table, dtype=torch.int64)
    task_group = torch.repeat_interleave(torch.arange(len(table), dtype=torch.int32),
                                         torch.tensor(counts, dtype=torch.int64))
    plan = _GroupPlan(_to_device(layout, device), _to_device(task_group, device), tasks,
                      a[0].shape[0], tuple(copies), tuple(live), strides_aligned, strided)
    _PLANS[key] = plan
    if len(_PLANS) > _PLAN_CACHE_SIZE:
        _PLANS.popitem(last=False)
    return plan


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host table -> device without synchronising (pinned staging, non-blocking copy)."""
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def pair_sq_distances_grouped(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
    """G pairs of ``(B, ...)`` tensors -> ``(G, B)`` float64, one launch per stage.

    All tensors share dtype, device and ``B`` (validated by the op layer); widths may differ. Per call
    only the pointers are read: layouts, chunking and the task table come from the cached plan.
    """
    device = a[0].device
    plan = _plan(a, b, device)
    groups, rows = len(a), plan.rows
    out = torch.empty((groups, rows), dtype=torch.float64, device=device)
    if rows == 0:
        return out
    if not plan.live:
        return out.zero_()
    tensors = [t for pair in zip(a, b, strict=True) for t in pair]
    for i in plan.copies:
        tensors[i] = tensors[i].contiguous()
    ptrs = [t.data_ptr() for t in tensors]
    base_i = min(plan.live, key=ptrs.__getitem__)
    base_ptr = ptrs[base_i]
    es = tensors[base_i].element_size()
    aligned = plan.strides_aligned and all(ptrs[i] % 16 == 0 for i in plan.live)
    offsets = [0] * len(ptrs)
    for i in plan.live:
        offsets[i] = (ptrs[i] - base_ptr) // es
    if device.type == "cpu":
        offsets_dev = torch.tensor(offsets, dtype=torch.int64)
    else:
        offsets_dev = torch.tensor(offsets, dtype=torch.int64, pin_memory=True).to(device, non_blocking=True)
    partial = torch.empty((plan.tasks,), dtype=torch.float64, device=device)
    _stage1_grouped[(plan.tasks,)](
        tensors[base_i], offsets_dev, plan.layout, plan.task_group, partial,
        NCOL=_NCOL, ALIGNED=aligned, VEC=_vec(a[0].dtype), BLOCK=BLOCK, STRIDED=plan.strided,
        num_warps=STAGE1_WARPS,
    )
    _stage2[(groups * rows,)](partial, out, rows, plan.layout, 0, GROUPED=True, NCOL=_NCOL,
                              BLOCK=STAGE2_BLOCK, num_warps=STAGE2_WARPS)
    return out
