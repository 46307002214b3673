"""Triton kernels for all distinct pairs: split-K Gram on tensor cores, fused distance epilogue, masked
direct recompute of the pairs the Gram cannot resolve (design and error model: ``ops/all_pairs.py``).

Three launches, no host-device synchronisation. The plan (tile config, number of K-splits) is fixed:
it follows from the shape and the device's SM count only, so two processes compute the same bits.
``VITPLAST_AUTOTUNE=1`` instead times every candidate config and split count once per shape and keeps
the fastest: faster where the fixed plan is not the best, but **not bitwise repeatable** across
processes (the split count changes the summation order).

1. ``_gram_partial_kernel`` grid ``(T, S)``: tile ``t`` of the lower block triangle (``T = nb (nb + 1)
   / 2`` tiles of ``BM x BM``, ``nb = ceil(N / BM)``) times K-chunk ``s``: ``tl.dot`` of the two row
   blocks over the chunk, float32 accumulator, written to a workspace ``(S, T, BM, BM)``. Tiles vary
   fastest so the programs reading the same K-chunk run together (the second read hits L2).
2. ``_gram_finish_kernel`` grid ``(T, BM / ROWS)``: ``ROWS`` rows of one tile per program; sums the S
   partials of each entry in float64 in a fixed order (deterministic), ``SB`` partials per step loaded
   at once (independent loads in flight), takes the norms from the diagonal tiles, forms ``n_i + n_j -
   2 G_ij``, marks unreliable pairs with -1 (``S_ij < tau (n_i + n_j)`` or not finite), writes the
   entries and their mirror, zero diagonal.
3. ``_recompute_kernel`` grid ``(N, ceil(N / JB))``: program ``(i, jb)`` reads the flags of the pairs
   ``(i, j)``, ``j`` in a block of ``JB`` below ``i``, with one vector load and exits when none is -1
   (the common case); otherwise it streams row ``i`` once beside the flagged rows ``j`` (masked loads)
   and recomputes ``sum_k (x_i - x_j)^2`` directly in float64, writing both entries.

Indexing: the large grid dimension (tiles, rows) is on axis 0 (up to 2^31 - 1 programs), the small ones
(splits, tile rows, row blocks) on axis 1 (at most 65535); every element offset is int64 (the workspace
and the output pass 2^31 elements near N = 65,000). `launch_grids` and `index_extents`
give both for a shape; a launch past the limits raises ``ValueError``.

Inputs: ``x`` of shape ``(N, K)`` float32/float16/bfloat16 with unit inner stride; output ``(N, N)``
float64 (squared distances of float32 rows may exceed float32's range; pairs whose float32 Gram
overflows or underflows are recomputed directly). bf16/fp16 tiles go to ``tl.dot`` as they are
(products exact in float32); float32 uses ``tf32x3`` on GPU. Runs under ``TRITON_INTERPRET=1`` on
CPU tensors (tests).

Tensor-core accumulation and the GPU error model
------------------------------------------------
Hopper tensor cores truncate inside the MMA accumulator: each accumulated product loses part of an ulp
of the running sum, towards zero for same-sign sums (norms): a bias linear in the products summed per
accumulator, ``MMA_TRUNC_PER_PRODUCT`` per product (the bias of iid bf16 rows in an H200 run of
``bench/all_pairs.py``, bench/measured/h200-2026-11-30/); rows sharing a large common component cancel
most of it. ``_gram_partial_kernel`` flushes its MMA accumulator every ``F`` BK-steps (``F * BK =
MMA_FLUSH_K = 128`` products, ``F >= 2``) into a round-to-nearest float32 sum, which bounds the bias
(``rel_err(d) * r``) by ``MMA_TRUNC_PER_PRODUCT * MMA_FLUSH_K`` for 16-bit inputs and three times that
for float32 (tf32x3 may chain its three MMAs through one accumulator; triton 3.8's sm_90 TTGIR adds the
running sum after the three dots). The trust threshold uses ``eps = max(2u, C_GPU u sqrt(L / S)) +
product_err + MMA_MARGIN * MMA_TRUNC_PER_PRODUCT * F * BK * passes`` (``C_GPU`` for the rounding part,
``MMA_MARGIN`` on the bias): with bf16 at the benchmark's shape ``tau < 1`` and iid pairs stay on the
Gram path; float32 gives ``tau > 1``: every pair is recomputed directly (correct, slow).
Not yet checked on a GPU: the error after the flush and the flush's cost (``bench/all_pairs.py`` prints
``c_gram`` beside the assumed ``eps``; the compiler must keep the flush: ``part`` is loop-carried,
``acc`` is no dot operand).
"""

from __future__ import annotations

import math
import os

import torch

from ...numerics import U32, gram_error, reliability_threshold, underflow_floor
from ...timing import median_ms
from ..cuda import autotune_enabled
from .all_pairs_grid import (  # noqa: F401  (re-exported: tests, bench)
    FINISH_ROWS,
    GRID_AXIS_MAX,
    _finish_rows,
    index_extents,
    launch_grids,
    num_tiles_of,
    splits_for,
)

try:
    import triton
    import triton.language as tl
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources
except ImportError:  # pragma: no cover - triton is a dependency of CUDA torch builds
    triton = None

C_GPU = 1.0  # rounding part of the GPU Gram error constant (flush adds, float64 combination)
TF32X3_PRODUCT_ERR = 2.0**-21  # relative error of one float32 product through tf32x3
MMA_FLUSH_K = 128  # products summed in the tensor-core accumulator before a flush (F * BK)
MMA_TRUNC_PER_PRODUCT = 6.1e-9  # truncation bias per accumulated product (H200, see above)
MMA_MARGIN = 4.0  # safety factor on the truncation bias
# finish: ROWS tile rows per program (ROWS * BM entries), SB split-K partials per load step
FINISH_SB, FINISH_WARPS = 16, 8
# recompute: JB candidate pairs (one row i, JB rows j) per program, BLOCK columns per step
RECOMPUTE_JB, RECOMPUTE_BLOCK = 8, 256


def flush_steps(bk: int) -> int:
    """``F``: BK-steps accumulated in the MMA accumulator between flushes (at least 2, see kernel)."""
    return max(2, MMA_FLUSH_K // bk)


def mma_truncation_error(bk: int, tf32x3: bool) -> float:
    """Bound (with margin) of the relative Gram error from in-MMA truncation, flush every F*BK products;
    tf32x3 chains three MMAs per step through one accumulator, hence three times the products."""
    return MMA_MARGIN * MMA_TRUNC_PER_PRODUCT * flush_steps(bk) * bk * (3 if tf32x3 else 1)


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def usable(device: torch.device) -> bool:
    """Whether ``backend="triton"`` can run on tensors of ``device``."""
    if triton is None:
        return False
    return device.type == "cuda" or (device.type == "cpu" and interpreted())


if triton is not None:

    @triton.jit
    def _tile_offset(t, BM: tl.constexpr):
        """Offset of tile ``t`` in one split of the workspace: int64 (program ids are int32)."""
        return t.to(tl.int64) * (BM * BM)

    @triton.jit
    def _ws_offset(s, t, num_tiles, BM: tl.constexpr):
        """Offset of tile ``t`` of split ``s`` in the ``(S, T, BM, BM)`` workspace (int64)."""
        return s.to(tl.int64) * num_tiles * (BM * BM) + _tile_offset(t, BM)

    @triton.jit
    def _gram_partial_kernel(
        x_ptr, ws_ptr, tiles_ptr, N, K, stride_row, chunk,
        BM: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
        MASK_ROWS: tl.constexpr, MASK_K: tl.constexpr, UPCAST: tl.constexpr, F: tl.constexpr,
    ):
        tl.static_assert(F >= 2, "F >= 2: with F == 1 the compiler folds the flush back into the MMA")
        t = tl.program_id(0)
        s = tl.program_id(1)
        num_tiles = tl.num_programs(0)
        bi = tl.load(tiles_ptr + 2 * t).to(tl.int64)
        bj = tl.load(tiles_ptr + 2 * t + 1).to(tl.int64)
        rm = bi * BM + tl.arange(0, BM).to(tl.int64)
        rn = bj * BM + tl.arange(0, BM).to(tl.int64)
        rk = tl.arange(0, BK).to(tl.int64)
        k_start = s.to(tl.int64) * chunk
        k_end = tl.minimum(k_start + chunk, K)
        a_ptrs = x_ptr + rm[:, None] * stride_row + (k_start + rk)[None, :]  # (BM, BK)
        b_ptrs = x_ptr + rn[None, :] * stride_row + (k_start + rk)[:, None]  # (BK, BM)
        # Tensor cores truncate inside their accumulator (error grows with the number of products it
        # has summed), so ``part`` (the MMA accumulator) holds at most F dots: every F steps it is
        # flushed into ``acc`` by an ordinary round-to-nearest float32 add and restarted from zero.
        # ``acc`` is never a dot operand and ``part`` is loop-carried (F >= 2), so the flush cannot be
        # folded back into ``tl.dot(a, b, acc)``.
        acc = tl.zeros((BM, BM), dtype=tl.float32)
        part = tl.zeros((BM, BM), dtype=tl.float32)
        n_steps = (k_end - k_start) // BK
        k_full = k_start + n_steps * BK
        for step in range(0, n_steps):  # whole K-blocks: masks only on rows, if N % BM != 0
            if MASK_ROWS:
                a = tl.load(a_ptrs, mask=rm[:, None] < N, other=0.0)
                b = tl.load(b_ptrs, mask=rn[None, :] < N, other=0.0)
            else:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            if UPCAST:  # the interpreter's tl.dot mishandles bf16; exact products either way
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            part = tl.dot(a, b, part, input_precision=PREC)
            if step % F == F - 1:  # flush: bounded MMA accumulation
                acc += part
                part = tl.zeros((BM, BM), dtype=tl.float32)
            a_ptrs += BK
            b_ptrs += BK
        if MASK_K:  # the last chunk's tail, shorter than BK
            if k_full < k_end:
                mk = (k_full + rk) < k_end
                a = tl.load(a_ptrs, mask=(rm[:, None] < N) & mk[None, :], other=0.0)
                b = tl.load(b_ptrs, mask=(rn[None, :] < N) & mk[:, None], other=0.0)
                if UPCAST:
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                part = tl.dot(a, b, part, input_precision=PREC)
        acc += part  # the last (n_steps % F) steps and the tail
        offs = tl.arange(0, BM)
        ws = ws_ptr + _ws_offset(s, t, num_tiles, BM)
        tl.store(ws + offs[:, None] * BM + offs[None, :], acc)

    @triton.jit
    def _gram_finish_kernel(ws_ptr, tiles_ptr, out_ptr, N, S, tau, floor,
                            BM: tl.constexpr, ROWS: tl.constexpr, SB: tl.constexpr):
        """Program ``(t, rb)``: rows ``rb * ROWS ..`` of tile ``t``, i.e. ``E = ROWS * BM`` Gram entries.
        Loads ``SB`` partials of every entry at once (``SB x E`` independent loads in flight) and sums
        them in float64: blocks of SB in a fixed order, a fixed-shape tree inside a block."""
        E: tl.constexpr = ROWS * BM
        t = tl.program_id(0).to(tl.int64)
        rb = tl.program_id(1)
        num_tiles = tl.num_programs(0)
        bi = tl.load(tiles_ptr + 2 * t).to(tl.int64)
        bj = tl.load(tiles_ptr + 2 * t + 1).to(tl.int64)
        ti = bi * (bi + 3) // 2  # index of diagonal tile (bi, bi)
        tj = bj * (bj + 3) // 2
        e = tl.arange(0, E)
        r_loc = (rb * ROWS + e // BM).to(tl.int64)  # row inside the tile
        c_loc = (e % BM).to(tl.int64)  # column inside the tile
        g_off = _tile_offset(t, BM) + r_loc * BM + c_loc
        ni_off = _tile_offset(ti, BM) + r_loc * (BM + 1)
        nj_off = _tile_offset(tj, BM) + c_loc * (BM + 1)
        sb = tl.arange(0, SB).to(tl.int64)
        stride_s = num_tiles.to(tl.int64) * (BM * BM)
        g = tl.zeros((E,), dtype=tl.float64)
        ni = tl.zeros((E,), dtype=tl.float64)
        nj = tl.zeros((E,), dtype=tl.float64)
        for s0 in range(0, S, SB):  # fixed order: deterministic
            s_idx = s0 + sb
            m = (s_idx < S)[:, None]
            base = s_idx[:, None] * stride_s
            g += tl.sum(tl.load(ws_ptr + base + g_off[None, :], mask=m, other=0.0).to(tl.float64), axis=0)
            ni += tl.sum(tl.load(ws_ptr + base + ni_off[None, :], mask=m, other=0.0).to(tl.float64), axis=0)
            nj += tl.sum(tl.load(ws_ptr + base + nj_off[None, :], mask=m, other=0.0).to(tl.float64), axis=0)
        scale = ni + nj
        sq = tl.maximum(scale - 2.0 * g, 0.0)
        # recomputed directly: the cancellation test fails, or the float32 Gram left its range (norms
        # not finite, or under the underflow floor: numerics.underflow_floor), or NaN
        ok = (sq >= tau * scale) & (scale >= floor) & (scale < float("inf"))
        rows = bi * BM + r_loc
        cols = bj * BM + c_loc
        val = tl.where(ok, sq, -1.0)
        val = tl.where(rows == cols, 0.0, val)
        inside = (rows < N) & (cols < N)
        tl.store(out_ptr + rows * N + cols, val, mask=inside & (rows >= cols))
        tl.store(out_ptr + cols * N + rows, val, mask=inside & (rows > cols))

    @triton.jit
    def _recompute_kernel(x_ptr, out_ptr, N, K, stride_row, JB: tl.constexpr, BLOCK: tl.constexpr):
        """Program ``(i, jb)``: the pairs ``(i, j)``, ``j`` in ``[jb * JB, jb * JB + JB)``, ``j < i``. One
        vector load of their flags; programs with none set (almost all, usually) exit. Otherwise row
        ``i`` is streamed once and the flagged rows ``j`` beside it (masked loads: unflagged rows cost
        no traffic), differences squared and summed in float64. Rows on grid axis 0 (N > 65535)."""
        i = tl.program_id(0).to(tl.int64)
        jb = tl.program_id(1).to(tl.int64)
        j = jb * JB + tl.arange(0, JB).to(tl.int64)
        valid = j < i
        flag = tl.load(out_ptr + i * N + j, mask=valid, other=0.0)
        need = valid & (flag < 0)
        if tl.max(need.to(tl.int32), axis=0) > 0:
            acc = tl.zeros((JB, BLOCK), dtype=tl.float64)
            offs0 = tl.arange(0, BLOCK).to(tl.int64)
            for k in range(0, K, BLOCK):
                offs = k + offs0
                m = offs < K
                xi = tl.load(x_ptr + i * stride_row + offs, mask=m, other=0.0).to(tl.float64)
                xj = tl.load(x_ptr + j[:, None] * stride_row + offs[None, :],
                             mask=need[:, None] & m[None, :], other=0.0).to(tl.float64)
                d = xj - xi[None, :]
                acc += d * d
            r = tl.sum(acc, axis=1)
            tl.store(out_ptr + i * N + j, r, mask=need)
            tl.store(out_ptr + j * N + i, r, mask=need)


# (BM, BK, num_warps, num_stages) on CUDA (BK <= MMA_FLUSH_K / 2, so that F = MMA_FLUSH_K / BK >= 2 and
# the flush bound holds). The fixed plan takes the first that fits the shape with the default split
# count (``splits_for``, 2 programs per SM); VITPLAST_AUTOTUNE=1 times every fitting config with K-splits
# for 1 and 2 programs per SM (ptxas gives the BM=128 bf16 config 172 registers x 256 threads: ONE
# resident program per SM, bench/codegen_sm90.py) and keeps the fastest per (N, K, dtype, device).
_CUDA_CONFIGS = ((128, 64, 8, 3), (64, 64, 4, 4), (128, 32, 8, 4))
_PROGRAMS_PER_SM = (1, 2)
_INTERPRET_CONFIG = (16, 32, 1, 1)
_config_cache: dict[tuple, tuple[tuple[int, int, int, int], int | None]] = {}
_tiles_cache: dict[tuple, torch.Tensor] = {}


def _tiles(nb: int, device: torch.device) -> torch.Tensor:
    """``(T, 2)`` int32 ``(bi, bj)`` of the lower block triangle, row-major (``t = bi(bi+1)/2 + bj``)."""
    key = (nb, device)
    if key not in _tiles_cache:
        ij = [(i, j) for i in range(nb) for j in range(i + 1)]
        _tiles_cache[key] = torch.tensor(ij, dtype=torch.int32).to(device)
    return _tiles_cache[key]


def _splits(num_tiles: int, k: int, bk: int, device: torch.device, splits: int | None) -> tuple[int, int]:
    """(S, chunk): K cut into S chunks of ``chunk`` (a multiple of BK), by default for about 2 programs
    per SM; S stays within grid axis 1."""
    if splits is None:
        if device.type == "cuda":
            splits = splits_for(num_tiles, torch.cuda.get_device_properties(device).multi_processor_count)
        else:
            splits = 2
    splits = max(1, min(splits, math.ceil(k / bk), GRID_AXIS_MAX[1]))
    chunk = math.ceil(math.ceil(k / splits) / bk) * bk
    return math.ceil(k / chunk), chunk


def _precision(dtype: torch.dtype, bk: int) -> tuple[str, float]:
    """(``tl.dot`` input precision, product + MMA truncation error term of the Gram error model)."""
    if interpreted():  # numpy float32 products and sums, round-to-nearest: no MMA truncation
        return "ieee", (U32 if dtype == torch.float32 else 0.0)
    if dtype == torch.float32:
        return "tf32x3", TF32X3_PRODUCT_ERR + mma_truncation_error(bk, True)
    # 16-bit operands: tensor-core products are exact in float32 whatever "tf32" says
    return "tf32", mma_truncation_error(bk, False)


def _launch(x: torch.Tensor, config: tuple[int, int, int, int], splits: int | None,
            tau: float | None = None) -> torch.Tensor:
    n, k = x.shape
    bm, bk, warps, stages = config
    tiles = _tiles(math.ceil(n / bm), x.device)
    num_tiles = tiles.shape[0]
    s, chunk = _splits(num_tiles, k, bk, x.device, splits)
    jb, block = (4, 64) if interpreted() else (RECOMPUTE_JB, RECOMPUTE_BLOCK)
    grids = launch_grids(n, bm, s, jb)
    prec, product_err = _precision(x.dtype, bk)
    if tau is None:
        tau = reliability_threshold(gram_error(k, s, C_GPU, product_err))
    ws = torch.empty((s, num_tiles, bm, bm), dtype=torch.float32, device=x.device)
    out = torch.empty((n, n), dtype=torch.float64, device=x.device)
    launch = {} if interpreted() else {"num_warps": warps, "num_stages": stages}
    _gram_partial_kernel[grids["partial"]](
        x, ws, tiles, n, k, x.stride(0), chunk, BM=bm, BK=bk, PREC=prec,
        MASK_ROWS=n % bm != 0, MASK_K=k % bk != 0,
        UPCAST=interpreted() and x.dtype == torch.bfloat16, F=flush_steps(bk), **launch,
    )
    finish = {} if interpreted() else {"num_warps": FINISH_WARPS}
    _gram_finish_kernel[grids["finish"]](ws, tiles, out, n, s, tau, underflow_floor(k), BM=bm,
                                         ROWS=_finish_rows(bm), SB=FINISH_SB, **finish)
    _recompute_kernel[grids["recompute"]](x, out, n, k, x.stride(0), JB=jb, BLOCK=block)
    return out


def _fitting(n: int) -> list[tuple[int, int, int, int]]:
    """The CUDA configs whose tiles are no taller than the next power of two of N (at least 64 rows);
    the first is the fixed plan's."""
    return [c for c in _CUDA_CONFIGS if c[0] <= max(64, 2 ** math.ceil(math.log2(max(n, 1))))]


def _timed_config(x: torch.Tensor) -> tuple[tuple[int, int, int, int], int | None]:
    """Under VITPLAST_AUTOTUNE=1: every fitting config x programs-per-SM timed once per (N, K, dtype,
    device), the fastest kept (not bitwise repeatable across processes)."""
    key = (x.shape[0], x.shape[1], x.dtype, x.device)
    if key not in _config_cache:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        best, best_ms = (_fitting(x.shape[0])[0], None), float("inf")
        for cfg in _fitting(x.shape[0]):
            for per_sm in _PROGRAMS_PER_SM:
                splits = splits_for(num_tiles_of(x.shape[0], cfg[0]), sms, per_sm)
                try:
                    ms = median_ms(lambda cfg=cfg, splits=splits: _launch(x, cfg, splits), device=x.device,
                                   reps=3, warmup=1)
                except (OutOfResources, CompilationError):  # e.g. more shared memory than the SM has
                    continue
                if ms < best_ms:
                    best, best_ms = (cfg, splits), ms
        _config_cache[key] = best
    return _config_cache[key]


def _plan_for(x: torch.Tensor, splits: int | None,
              config: tuple[int, int, int, int] | None) -> tuple[tuple[int, int, int, int], int | None]:
    """(tile config, K-splits or None for the default): the explicit ones where given; else the fixed
    plan, or the timed one under VITPLAST_AUTOTUNE=1 (not while a CUDA graph is being captured)."""
    if config is not None:
        return config, splits
    if x.device.type != "cuda":
        picked, picked_splits = _INTERPRET_CONFIG, None
    elif autotune_enabled() and not torch.cuda.is_current_stream_capturing():
        picked, picked_splits = _timed_config(x)
    else:
        picked, picked_splits = _fitting(x.shape[0])[0], None
    return picked, splits if splits is not None else picked_splits


def all_pair_sq_distances_triton(x: torch.Tensor, *, splits: int | None = None,
                                 config: tuple[int, int, int, int] | None = None,
                                 tau: float | None = None) -> torch.Tensor:
    """``(N, K) -> (N, N)`` float32: `all_pair_sq_sums_triton` rounded to float32."""
    return all_pair_sq_sums_triton(x, splits=splits, config=config, tau=tau).to(torch.float32)


def all_pair_sq_sums_triton(x: torch.Tensor, *, splits: int | None = None,
                            config: tuple[int, int, int, int] | None = None,
                            tau: float | None = None) -> torch.Tensor:
    """``(N, K) -> (N, N)`` float64 squared distances of all pairs of rows (see module docstring).

    ``splits`` forces the number of K-chunks, ``config`` = ``(BM, BK, num_warps, num_stages)`` the
    tile config (tests and benchmarks); by default the fixed plan (module docstring). ``tau``
    overrides the trust threshold (``0.0``: trust every Gram value; the bench calibrates with it).
    """
    if triton is None:
        raise RuntimeError("backend='triton' needs the triton package (pip install triton)")
    if x.stride(1) != 1 or x.stride(0) < x.shape[1]:
        x = x.contiguous()
    cfg, s = _plan_for(x, splits, config)
    return _launch(x, cfg, s, tau)


def launch_plan(x: torch.Tensor, splits: int | None = None) -> dict[str, int]:
    """The tile config and split-K plan used for ``x (N, K)`` (benchmarks report and calibrate with it)."""
    (bm, bk, warps, stages), splits = _plan_for(x, splits, None)
    num_tiles = num_tiles_of(x.shape[0], bm)
    s, chunk = _splits(num_tiles, x.shape[1], bk, x.device, splits)
    return {"BM": bm, "BK": bk, "num_warps": warps, "num_stages": stages, "tiles": num_tiles,
            "splits": s, "chunk": chunk, "flush_k": flush_steps(bk) * bk}


def gram_eps(x: torch.Tensor, splits: int | None = None) -> float:
    """The relative Gram error the trust threshold assumes for ``x (N, K)`` on its device (benchmarks
    compare it with the measured one)."""
    plan = launch_plan(x, splits)
    return gram_error(x.shape[1], plan["splits"], C_GPU, _precision(x.dtype, plan["BK"])[1])
