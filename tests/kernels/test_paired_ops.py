"""The paired op on every CPU-capable backend against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from helpers import DTYPES, SQ_RTOL, assert_close_rel, carved_pair, rand, strided_views

import vitplast_kernels as vk

CPU_BACKENDS = ["cpu", "torch", "auto"]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (5, 17), (2, 1000003), (4, 7, 33), (1, 197, 768)])
def test_matches_float64_reference(backend, dtype, shape, gen):
    a = rand(shape, dtype, gen)
    b = rand(shape, dtype, gen)
    got = vk.pair_sq_distances(a, b, backend=backend)
    assert got.dtype == torch.float32 and got.shape == (shape[0],)
    rtol = SQ_RTOL[dtype] if backend != "torch" else 1e-5
    assert_close_rel(got, vk.pair_sq_distances_reference(a, b), rtol, f"{backend} {dtype} {shape}")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 17, 24), (2, 65, 130)])
def test_strided_views(backend, dtype, shape, gen):
    for name, a, b in strided_views(shape, dtype, gen):
        assert name == "halves" or not (a.is_contiguous() and b.is_contiguous()), name
        got = vk.pair_sq_distances(a, b, backend=backend)
        assert_close_rel(got, vk.pair_sq_distances_reference(a, b), 1e-5, f"{backend} {name} {dtype}")


def test_expanded_and_zero_stride_views(gen):
    base = rand((1, 40, 96), torch.float32, gen)
    a = base.expand(4, 40, 96)  # batch stride 0
    b = rand((4, 96), torch.float32, gen)[:, None, :].expand(4, 40, 96)  # token stride 0
    assert_close_rel(vk.pair_sq_distances(a, b), vk.pair_sq_distances_reference(a, b), 2e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bf16_differences_are_taken_after_upcast(dtype, gen):
    # large common offset, small difference: the difference of bf16 values in bf16 would round
    a = (rand((4, 4096), torch.float32, gen) * 0.01 + 100.0).to(dtype)
    b = (a.float() + rand((4, 4096), torch.float32, gen) * 0.5).to(dtype)
    assert_close_rel(vk.pair_sq_distances(a, b), vk.pair_sq_distances_reference(a, b), SQ_RTOL[dtype])


def test_fp16_extremes_do_not_overflow():
    # squares of fp16 differences overflow fp16 (65504); sums must not
    a = torch.full((2, 3000), 60000.0, dtype=torch.float16)
    b = torch.full((2, 3000), -60000.0, dtype=torch.float16)
    a[1, 7] = float("inf")
    got = vk.pair_sq_distances(a, b)
    assert_close_rel(got[:1], vk.pair_sq_distances_reference(a, b)[:1], 1e-6)
    assert got[1].isinf()


def test_fp16_subnormals_and_nan():
    tiny = torch.tensor([6e-8, 3e-6, -5e-7, 0.0] * 50, dtype=torch.float16)
    a = torch.stack([tiny, tiny.flip(0)])
    b = torch.zeros_like(a)
    assert_close_rel(vk.pair_sq_distances(a, b), vk.pair_sq_distances_reference(a, b), 1e-6)
    a[0, 3] = float("nan")
    assert vk.pair_sq_distances(a, b)[0].isnan()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_bf16_blocks_outside_float32_square_range(backend, gen):
    # long bf16 rows whose 1024-element blocks leave float32's square range (differences of 1e30,
    # 1e-30, subnormal 1e-39) beside ordinary blocks and blocks of identical values: the float64 sums
    # match the reference (the CPU kernel sums such blocks again in double)
    from vitplast_kernels.ops.paired import pair_sq_sums

    k = 6 * 1024 + 40
    scale = torch.ones(4, k, dtype=torch.float64)
    scale[0] = 1e-30
    scale[1, 2048:3072] = 1e30
    scale[2, :1024], scale[2, 4096:5120] = 1e-39, 1e-20
    scale[3] = 1e-39
    a = (rand((4, k), torch.float32, gen).double() * scale).to(torch.bfloat16)
    b = (rand((4, k), torch.float32, gen).double() * scale).to(torch.bfloat16)
    b[2, 1024:2048] = a[2, 1024:2048]  # a block of exact zero differences
    got = pair_sq_sums(a, b, backend=backend)
    assert got.dtype == torch.float64
    want = vk.pair_sq_distances_reference(a, b)  # down to 1e-74: relative error, no absolute floor
    assert ((got - want).abs() / want).max().item() <= SQ_RTOL[torch.bfloat16], backend


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_identical_pairs_are_zero_and_ratios_nan(backend, gen):
    x = rand((4, 10, 8), torch.float32, gen)
    y = x.clone()
    y[1] += 1.0
    fx, fy = x * 3, y * 3
    assert vk.pair_sq_distances(x, x, backend=backend).eq(0).all()
    r = vk.pair_ratios(fx, fy, x, y, backend=backend)
    assert r[[0, 2, 3]].isnan().all()
    assert r[1].item() == pytest.approx(3.0, rel=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pair_ratios_and_distances(dtype, gen):
    x, y = rand((6, 5, 12), dtype, gen), rand((6, 5, 12), dtype, gen)
    fx, fy = rand((6, 5, 48), dtype, gen), rand((6, 5, 48), dtype, gen)
    assert_close_rel(vk.pair_ratios(fx, fy, x, y), vk.pair_ratios_reference(fx, fy, x, y), 2e-5)
    assert_close_rel(vk.pair_distances(x, y), vk.pair_sq_distances_reference(x, y).sqrt(), 2e-5)


def test_deterministic_across_runs_and_thread_counts(gen):
    a = rand((8, 257, 384), torch.float32, gen)
    b = rand((8, 257, 384), torch.float32, gen)
    first = vk.pair_sq_distances(a, b, backend="cpu")
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            assert torch.equal(vk.pair_sq_distances(a, b, backend="cpu"), first)
    finally:
        torch.set_num_threads(threads)


ALIAS_PERIOD = 2**28  # bytes: csrc/cpu/span_sq_sum_avx512.cpp stages b when a - b is near a multiple


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("skew", [0, 4, -4, 64, 200, -4096])  # bytes beyond 2^28 between a's and b's rows
def test_streams_a_multiple_of_2_28_bytes_apart(dtype, skew, gen):
    # a and b carved out of one untouched 256 MiB allocation (only the rows' pages are written): the
    # CPU kernels read such b through a copy on the stack; the bits must be those of the same rows
    # anywhere else, and right against float64 (rows of 3 x 1100 + 7 elements: staged blocks and tails)
    rows, width = 3, 1100 * 3 + 7
    a, b = carved_pair(rand((rows, width), dtype, gen), rand((rows, width), dtype, gen), ALIAS_PERIOD + skew)
    b[1, 500:900] = a[1, 500:900]  # identical stretches: zero lanes in the 16-bit range check
    got = vk.pair_sq_distances(a, b, backend="cpu")
    elsewhere = vk.pair_sq_distances(a.clone(), b.clone(), backend="cpu")
    assert torch.equal(got, elsewhere), f"{dtype} skew {skew}: {got.tolist()} vs {elsewhere.tolist()}"
    assert_close_rel(got, vk.pair_sq_distances_reference(a, b), SQ_RTOL[dtype], f"{dtype} skew {skew}")


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_grouped_matches_single(backend, gen):
    shapes = [(3, 17, 24), (3, 17, 96), (3, 5), (3, 1, 1000)]
    a = [rand(s, torch.bfloat16, gen) for s in shapes]
    b = [rand(s, torch.bfloat16, gen) for s in shapes]
    a[1] = a[1][:, :, ::1].transpose(1, 2).contiguous().transpose(1, 2)  # non-contiguous member
    got = vk.pair_sq_distances_grouped(a, b, backend=backend)
    assert got.shape == (4, 3)
    for g in range(4):
        assert_close_rel(got[g], vk.pair_sq_distances_reference(a[g], b[g]), 2e-5, f"group {g}")
        if backend == "cpu":  # same blocks, same summation order: bitwise equal to the single op
            assert torch.equal(got[g], vk.pair_sq_distances(a[g], b[g], backend="cpu")), f"group {g}"


@pytest.mark.slow
def test_more_than_2_31_elements():
    # one (2, K) fp16 tensor whose second row starts past 2^31 bytes and ends past 2^31 elements
    k = 2**30 + 17
    t = torch.empty((2, k), dtype=torch.float16)
    t[0].fill_(1.0)
    t[1].fill_(0.0)
    t[1, -1] = 3.0
    t[0, -2] = -1.0
    got = vk.pair_sq_distances(t[:1], t[1:], backend="cpu").item()
    expected = (k - 2) * 1.0 + (1.0 - 3.0) ** 2 + 1.0
    assert got == pytest.approx(expected, rel=1e-6)
