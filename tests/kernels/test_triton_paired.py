"""Triton paired kernels (single + grouped) against the float64 reference.

Without a GPU these run under TRITON_INTERPRET=1 (set by conftest.py) on CPU tensors: small shapes,
chosen to cross the kernels' boundaries (one BLOCK = 4096 elements, several chunks per row, masked
tails, strided runs, copies of non-streamable views).
"""

from __future__ import annotations

import os

import pytest
import torch
from helpers import DTYPES, SQ_RTOL, assert_close_rel, rand, strided_views

import vitplast_kernels as vk

triton = pytest.importorskip("triton")

if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton needs a CUDA device or TRITON_INTERPRET=1", allow_module_level=True)

from vitplast_kernels.backends.triton import paired as tp  # noqa: E402  (after the interpreter switch)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BLOCK = tp.BLOCK


def _ref(a, b):
    return vk.pair_sq_distances_reference(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape",
    [(1, 1), (3, 5, 17), (2, BLOCK + 3), (1, 9 * BLOCK + 5), (5, 3, 2731)],
    ids=["1x1", "odd", "block+tail", "multi-chunk", "B5"],
)
def test_single_matches_reference(dtype, shape, gen):
    a = rand(shape, dtype, gen, DEVICE)
    b = rand(shape, dtype, gen, DEVICE)
    got = vk.pair_sq_distances(a, b, backend="triton")
    assert got.dtype == torch.float32 and got.shape == (shape[0],) and got.device == a.device
    assert_close_rel(got, _ref(a, b), SQ_RTOL[dtype], f"triton {dtype} {shape}")


def test_multi_chunk_rows_really_split():
    # one row of 9 BLOCKs + 5 is cut into 3 tasks of MIN_BLOCKS_PER_CHUNK BLOCKs, summed in stage 2
    assert tp.chunk_size(1, 9 * BLOCK + 5) == tp.MIN_BLOCKS_PER_CHUNK * BLOCK == 4 * BLOCK
    assert tp.chunk_size(7, 3 * BLOCK + 5) == 4 * BLOCK  # a short row is one task
    # B = 32 rows of a ViT-Huge activation are split into > 20 chunks each (occupancy on 132 SMs)
    assert 257 * 1280 // tp.chunk_size(32, 257 * 1280) >= 20
    assert tp.chunk_size(10**6, 10) == BLOCK


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_views(dtype, gen):
    for name, a, b in strided_views((3, 5, 70), dtype, gen, DEVICE):
        got = vk.pair_sq_distances(a, b, backend="triton")
        assert_close_rel(got, _ref(a, b), SQ_RTOL[dtype], f"triton {name} {dtype}")


def test_sliced_views_are_read_in_place_on_the_strided_path(gen):
    w = rand((2, 6, 300), torch.float32, gen, DEVICE)
    a, b = w[:, 1:5, 100:230], w[:, 2:6, 3:133]  # runs of 130 contiguous elements
    p = tp.pair_layout(a, b)
    assert p.a.data_ptr() == a.data_ptr() and p.b.data_ptr() == b.data_ptr(), "must not copy"
    assert not p.contiguous_rows
    assert (p.la.inner, p.la.outer_stride) == (130, 300)
    assert_close_rel(vk.pair_sq_distances(a, b, backend="triton"), _ref(a, b), SQ_RTOL[torch.float32])


def test_layout_mirror_of_row_layout_h(gen):
    t = torch.zeros(4, 5, 6)
    assert tp.collapse_rows(t) == tp.RowLayout(30, 30, 30)
    assert tp.collapse_rows(t[:, 1:4]) == tp.RowLayout(30, 18, 18)
    assert tp.collapse_rows(t[:, :, 1:4]) == tp.RowLayout(30, 3, 6)
    assert tp.collapse_rows(t.transpose(1, 2)) is None
    assert tp.collapse_rows(t[:1].expand(4, 5, 6)) == tp.RowLayout(0, 30, 30)
    # a transposed view is copied once (documented fallback), then streamed
    p = tp.pair_layout(t.transpose(1, 2), t.transpose(1, 2))
    assert p.a.is_contiguous() and p.contiguous_rows


def test_expanded_views(gen):
    base = rand((1, 40, 96), torch.float32, gen, DEVICE)
    a = base.expand(4, 40, 96)
    b = rand((4, 96), torch.float32, gen, DEVICE)[:, None, :].expand(4, 40, 96)
    assert_close_rel(vk.pair_sq_distances(a, b, backend="triton"), _ref(a, b), SQ_RTOL[torch.float32])


def test_fp16_extremes_do_not_overflow():
    a = torch.full((2, 3000), 60000.0, dtype=torch.float16, device=DEVICE)
    b = torch.full((2, 3000), -60000.0, dtype=torch.float16, device=DEVICE)
    a[1, 7] = float("inf")
    got = vk.pair_sq_distances(a, b, backend="triton")
    assert_close_rel(got[:1], _ref(a, b)[:1], 1e-6)
    assert got[1].isinf()


def _group(dtype, gen):
    """Tensors of different widths and layouts sharing B = 3 pairs."""
    big = rand((6, 7, 130), dtype, gen, DEVICE)
    wide = rand((3, 2, 300), dtype, gen, DEVICE)
    xs = [rand((3, 5, 13), dtype, gen, DEVICE), big[:3], rand((3, 9 * BLOCK + 9), dtype, gen, DEVICE),
          wide[:, :, 100:230], rand((3, 4, 8), dtype, gen, DEVICE).transpose(1, 2)]
    ys = [rand((3, 5, 13), dtype, gen, DEVICE), big[3:], rand((3, 9 * BLOCK + 9), dtype, gen, DEVICE),
          wide[:, :, 5:135], rand((3, 8, 4), dtype, gen, DEVICE)]
    return xs, ys


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_matches_reference_and_single(dtype, gen):
    xs, ys = _group(dtype, gen)
    got = vk.pair_sq_distances_grouped(xs, ys, backend="triton")
    assert got.shape == (len(xs), 3) and got.dtype == torch.float32
    for g, (x, y) in enumerate(zip(xs, ys, strict=True)):
        assert_close_rel(got[g], _ref(x, y), SQ_RTOL[dtype], f"grouped[{g}] {dtype}")
        # chunking depends only on the tensor itself: alone or in a group, the same partial sums
        single = vk.pair_sq_distances(x, y, backend="triton")
        assert_close_rel(got[g], single, 1e-6, f"grouped[{g}] vs single")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_contiguous_rows_take_the_vector_only_kernel(dtype, gen):
    # every tensor with contiguous rows (what capture hands over): the STRIDED=False specialisation;
    # widths with several chunks per row, a tail, a row shorter than one BLOCK, a batch slice
    from vitplast_kernels.backends.triton import paired as tp

    big = rand((6, 2 * BLOCK + 5), dtype, gen, DEVICE)
    every_other = rand((6, 7, 33), dtype, gen, DEVICE)  # batch-strided view: rows contiguous, not the tensor
    xs = [rand((3, 5, 13), dtype, gen, DEVICE), big[:3], rand((3, 9 * BLOCK + 9), dtype, gen, DEVICE),
          every_other[::2]]
    ys = [rand((3, 5, 13), dtype, gen, DEVICE), big[3:], rand((3, 9 * BLOCK + 9), dtype, gen, DEVICE),
          every_other[1::2]]
    assert not xs[3].is_contiguous()
    assert not tp._plan(xs, ys, xs[0].device).strided
    assert tp._plan(*_group(dtype, gen), xs[0].device).strided
    got = vk.pair_sq_distances_grouped(xs, ys, backend="triton")
    for g, (x, y) in enumerate(zip(xs, ys, strict=True)):
        assert_close_rel(got[g], _ref(x, y), SQ_RTOL[dtype], f"contiguous group[{g}] {dtype}")


def test_grouped_with_empty_rows_and_repeated_calls(gen):
    xs = [rand((2, 0), torch.float32, gen, DEVICE), rand((2, 50), torch.float32, gen, DEVICE)]
    ys = [rand((2, 0), torch.float32, gen, DEVICE), rand((2, 50), torch.float32, gen, DEVICE)]
    first = vk.pair_sq_distances_grouped(xs, ys, backend="triton")
    assert torch.equal(first[0], torch.zeros(2, device=DEVICE))
    assert_close_rel(first[1], _ref(xs[1], ys[1]), SQ_RTOL[torch.float32])
    # cached plan, new pointers: still right, bitwise repeatable
    xs2 = [x.clone() for x in xs]
    again = vk.pair_sq_distances_grouped(xs2, ys, backend="triton")
    assert torch.equal(first, again)


def test_custom_ops_pass_opcheck(gen):
    a = rand((2, 3, 20), torch.float32, gen, DEVICE)
    b = rand((2, 3, 20), torch.float32, gen, DEVICE)
    torch.library.opcheck(torch.ops.vitplast.pair_sq_distances_triton.default, (a, b))
    c = rand((2, 7), torch.float32, gen, DEVICE)
    d = rand((2, 7), torch.float32, gen, DEVICE)
    torch.library.opcheck(torch.ops.vitplast.pair_sq_distances_grouped_triton.default, ([a, c], [b, d]))


def test_backend_is_listed_and_guards_devices():
    assert "triton" in vk.backend_names()
    if not torch.cuda.is_available():
        a = torch.ones(2, 3)
        assert vk.pair_sq_distances(a, a, backend="triton").eq(0).all()
