"""The CPU all-pairs Gram kernel (``vitplast::gram_lower_f32``, AVX-512 tiles): against the float64
Gram, bitwise the same for every thread count, its input checks; and the BLAS path that CPUs without
AVX-512 take, still exact."""

from __future__ import annotations

import pytest
import torch
from test_all_pairs import assert_matrix_exact

import vitplast_kernels as vk
from vitplast_kernels.backends import cpu as ap

needs_kernel = pytest.mark.skipif(not ap.tile_gram_usable(), reason="needs _C on a CPU with AVX-512 F/DQ")


def _float64_gram(x: torch.Tensor, anchor: torch.Tensor | None) -> torch.Tensor:
    y = (x - anchor if anchor is not None else x).double()  # centred in float32, as the kernel does
    return y @ y.T


@needs_kernel
@pytest.mark.parametrize(("n", "k"), [(1, 5), (5, 17), (11, 300), (13, 1030), (9, 0)],
                         ids=str)
def test_tile_gram_matches_float64(n, k, gen):
    # odd row counts (partial 4x4 tiles), column counts off the 16-lane and 512-column grids,
    # rows with a gap between them (row stride > K), with and without an anchor
    wide = torch.randn(n, k + 7, generator=gen)[:, 3 : 3 + k]
    anchor = torch.randn(k, generator=gen) + wide[0]
    for a in (None, anchor):
        got = torch.ops.vitplast.gram_lower_f32(wide, a)
        ref = _float64_gram(wide, a)
        norms = ref.diagonal()
        scale = norms[:, None] + norms[None, :]
        assert got.dtype == torch.float64 and torch.equal(got, got.T)
        assert ((got - ref).abs() <= 1e-6 * scale).all(), (n, k, a is not None)


@needs_kernel
def test_tile_gram_bits_do_not_depend_on_threads(gen):
    x = torch.randn(37, 20000, generator=gen)  # 17.6M FMAs, over the 2^23 one-thread cutoff: tiles split
    anchor = x[3].clone()
    before = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            runs.append([torch.ops.vitplast.gram_lower_f32(x, a) for a in (None, anchor)])
    finally:
        torch.set_num_threads(before)
    for other in runs[1:]:
        assert all(torch.equal(p, q) for p, q in zip(runs[0], other, strict=True))


@needs_kernel
def test_tile_gram_rejects_bad_inputs():
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.vitplast.gram_lower_f32(torch.ones(3, 4, dtype=torch.float64), None)
    with pytest.raises(RuntimeError, match="unit column stride"):
        torch.ops.vitplast.gram_lower_f32(torch.ones(4, 3).T, None)
    with pytest.raises(RuntimeError, match="anchor"):
        torch.ops.vitplast.gram_lower_f32(torch.ones(3, 4), torch.ones(5))


def test_blas_path_stays_exact(gen, monkeypatch):
    # what a CPU without AVX-512 runs: near-duplicates, identical rows, and the centring fallback
    monkeypatch.setattr(ap, "tile_gram_usable", lambda: False)
    a = torch.randn(13, 5000, generator=gen)
    a[4] = a[2]
    a[7] = a[6] + 1e-4 * torch.randn(5000, generator=gen)
    assert_matrix_exact(vk.all_pair_sq_distances(a, backend="cpu"), a, "BLAS random")
    shared = torch.randn(5000, generator=gen) * 100 + a
    assert_matrix_exact(vk.all_pair_sq_distances(shared, backend="cpu"), shared, "BLAS shared")
