"""All distinct pairs (issue 5): every backend against the float64 reference, near-duplicates, identical
rows, the cancellation threshold's edge, ratios, the op's schema. Triton runs interpreted without CUDA."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import DTYPES, rand

import vitplast_kernels as vk
from vitplast_kernels import all_pairs as ap

BACKENDS = ["cpu", "torch", "triton"]
DIST_RTOL = 1e-5  # per-pair relative error of the distance (the bar)


def _triton_ok() -> bool:
    from vitplast_kernels import triton_all_pairs

    return triton_all_pairs.usable(torch.device("cpu"))


def _run(a, backend, **kw):
    if backend == "triton":
        if not _triton_ok():
            pytest.skip("triton not importable")
        if kw:
            from vitplast_kernels.triton_all_pairs import all_pair_sq_distances_triton

            return all_pair_sq_distances_triton(a.reshape(a.shape[0], -1), **kw)
    return vk.all_pair_sq_distances(a, backend=backend)


def assert_matrix_exact(got: torch.Tensor, a: torch.Tensor, what: str) -> None:
    """(N, N) float32, symmetric, zero diagonal, zero exactly where rows are equal, distances within
    DIST_RTOL of float64."""
    ref = vk.all_pair_sq_distances_reference(a)
    n = a.shape[0]
    assert got.shape == (n, n) and got.dtype == torch.float32, what
    assert torch.equal(got, got.T), f"{what}: not symmetric"
    assert got.diagonal().eq(0).all(), f"{what}: non-zero diagonal"
    zero = ref == 0
    assert got[zero].eq(0).all(), f"{what}: identical rows give {got[zero].abs().max().item()}"
    d, r = got.double().sqrt()[~zero], ref.sqrt()[~zero]
    assert torch.isfinite(d).all(), f"{what}: non-finite entries"
    if d.numel():
        err = ((d - r).abs() / r).max().item()
        assert err <= DIST_RTOL, f"{what}: max relative distance error {err:.3g}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 7), (2, 3), (19, 5, 13), (33, 70)])
def test_random_rows_match_float64(backend, dtype, shape, gen):
    a = rand(shape, dtype, gen)
    assert_matrix_exact(_run(a, backend), a, f"{backend} {dtype} {shape}")


def _near_duplicates(n: int, k: int, dtype, gen, offset: float = 0.0) -> torch.Tensor:
    """Rows with a shared component, identical pairs and near-duplicates at several distances."""
    base = torch.randn(k, generator=gen) * offset
    a = base + torch.randn(n, k, generator=gen)
    a[1] = a[0]  # identical
    a[5] = a[4]
    for row, rel in ((2, 1e-2), (3, 1e-4), (6, 1e-6), (7, 3e-3)):
        src = row + 5
        a[row] = a[src] + rel * a[src].norm() / math.sqrt(k) * torch.randn(k, generator=gen)
    a = a.to(dtype)
    if dtype != torch.float32:  # make sure the rounding kept the near-duplicates distinct
        a[6].view(-1)[0] = a[11].view(-1)[0] + (a[11].view(-1)[0].abs() * 0.02 + 1e-3)
    return a


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0.0, 30.0])
def test_near_duplicates_and_identical_rows(backend, dtype, offset, gen):
    a = _near_duplicates(20, 3 * 41, dtype, gen, offset)
    got = _run(a, backend)
    assert got[0, 1] == 0 and got[4, 5] == 0
    assert_matrix_exact(got, a, f"{backend} {dtype} offset={offset}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_split_k_and_masks(dtype, gen):
    # N not a multiple of the tile, K not a multiple of the chunk, several K-chunks
    a = _near_duplicates(21, 173, dtype, gen, offset=3.0)
    for splits in (1, 3, 7):
        assert_matrix_exact(_run(a, "triton", splits=splits), a, f"triton splits={splits} {dtype}")


def test_cpu_threshold_edge_long_rows(gen):
    # every pair just above the trust threshold at ViT-Small size: the Gram's worst trusted case
    n, k = 24, 257 * 384
    tau = ap.reliability_threshold(ap.gram_error(k, k // ap.CPU_CHUNK, ap.C_CPU))
    scale = math.sqrt(1 / (1.5 * tau) - 1)  # r = S_ij / (n_i + n_j) ~= 1 / (1 + scale^2) = 1.5 tau
    a = torch.randn(k, generator=gen) * scale + torch.randn(n, k, generator=gen)
    sq, unreliable, _ = ap._gram_sq(a, ap.CPU_CHUNK)
    assert unreliable.sum() == 0, "the edge case should be resolved by the Gram alone"
    assert_matrix_exact(vk.all_pair_sq_distances(a, backend="cpu"), a, "cpu threshold edge")


def test_cpu_centring_fallback(gen):
    # a common component 100x the noise: every pair is unreliable until the rows are centred
    a = torch.randn(4000, generator=gen) * 100 + torch.randn(16, 4000, generator=gen)
    _, unreliable, _ = ap._gram_sq(a, ap.CPU_CHUNK)
    assert unreliable.sum() == 16 * 15 // 2
    _, unreliable_c, _ = ap._gram_sq(a - a.mean(0), ap.CPU_CHUNK)
    assert unreliable_c.sum() == 0
    assert_matrix_exact(vk.all_pair_sq_distances(a, backend="cpu"), a, "cpu centred")


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_inputs(backend, gen):
    t = rand((12, 9, 17), torch.float32, gen).transpose(1, 2)  # (12, 17, 9) non-contiguous
    assert_matrix_exact(_run(t, backend), t, f"{backend} transposed")
    s = rand((24, 40), torch.float16, gen)[::2, 3:33]
    assert_matrix_exact(_run(s, backend), s, f"{backend} sliced")


@pytest.mark.parametrize("backend", BACKENDS)
def test_deterministic(backend, gen):
    a = _near_duplicates(17, 90, torch.bfloat16, gen, offset=10.0)
    assert torch.equal(_run(a, backend), _run(a, backend))


@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_non_finite_rows(backend, gen):
    a = rand((6, 50), torch.float32, gen)
    a[2, 7] = float("inf")
    a[4, 1] = float("nan")
    got = _run(a, backend)
    assert got[2, [0, 1, 3, 5]].isinf().all() and got[4].isnan().sum() == 5
    good = [0, 1, 3, 5]
    assert_matrix_exact(got[good][:, good], a[good], f"{backend} finite rows")


@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_ratios(backend, gen):
    if backend == "triton" and not _triton_ok():
        pytest.skip("triton not importable")
    x = rand((10, 6, 8), torch.float32, gen)
    x[3] = x[8]
    fx = torch.tanh(x @ rand((8, 12), torch.float32, gen))
    r = vk.all_pair_ratios(fx, x, backend=backend)
    num = vk.all_pair_sq_distances_reference(fx)
    den = vk.all_pair_sq_distances_reference(x)
    expect = (num / den).sqrt()
    nan = torch.eye(10, dtype=torch.bool) | (den == 0)
    assert r[nan].isnan().all() and not r[~nan].isnan().any()
    err = ((r.double() - expect).abs() / expect)[~nan].max().item()
    assert err <= 2e-5, err


def test_errors_name_the_argument():
    x = torch.randn(4, 5)
    with pytest.raises(ValueError, match="backend"):
        vk.all_pair_sq_distances(x, backend="nope")
    with pytest.raises(TypeError, match="a must be float32"):
        vk.all_pair_sq_distances(torch.ones(4, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="a must have at least 2 dims"):
        vk.all_pair_sq_distances(torch.randn(5))
    with pytest.raises(ValueError, match="x has 3 rows but fx has 4"):
        vk.all_pair_ratios(x, torch.randn(3, 5))


def test_opcheck():
    a = torch.randn(6, 3, 5)
    for backend in ("cpu", "torch"):
        torch.library.opcheck(torch.ops.vitplast.all_pair_sq_distances.default, (a, backend))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_gpu_vit_sizes(dtype, gen):
    a = _near_duplicates(130, 197 * 384, dtype, gen, offset=5.0).cuda()
    assert_matrix_exact(vk.all_pair_sq_distances(a, backend="triton").cpu(), a.cpu(), f"cuda {dtype}")
    assert torch.equal(vk.all_pair_sq_distances(a), vk.all_pair_sq_distances(a))
