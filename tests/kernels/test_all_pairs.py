"""All distinct pairs: every backend against the float64 reference, near-duplicates, identical
rows, the cancellation threshold's edge, ratios, the op's schema. Triton runs interpreted without CUDA."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import DTYPES, rand

import vitplast_kernels as vk
from vitplast_kernels import numerics
from vitplast_kernels.backends import cpu as ap

try:
    import triton
    import triton.language as tl

    from vitplast_kernels.backends.triton import all_pairs as tap
except ImportError:  # triton is optional on CPU-only installs
    triton = None

BACKENDS = ["cpu", "torch", "triton"]
DIST_RTOL = 1e-5  # per-pair relative error of the distance (the design's bar)


def _triton_ok() -> bool:
    from vitplast_kernels.backends.triton import all_pairs as triton_all_pairs

    return triton_all_pairs.usable(torch.device("cpu"))


def _run(a, backend, **kw):
    if backend == "triton":
        if not _triton_ok():
            pytest.skip("triton not importable")
        if kw:
            from vitplast_kernels.backends.triton.all_pairs import all_pair_sq_distances_triton

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
    a = _near_duplicates(14, 3 * 41, dtype, gen, offset)
    got = _run(a, backend)
    assert got[0, 1] == 0 and got[4, 5] == 0
    assert_matrix_exact(got, a, f"{backend} {dtype} offset={offset}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_split_k_and_masks(dtype, gen):
    # N not a multiple of the tile, K not a multiple of the chunk, several K-chunks
    a = _near_duplicates(19, 173, dtype, gen, offset=3.0)
    for splits in (1, 4):
        assert_matrix_exact(_run(a, "triton", splits=splits), a, f"triton splits={splits} {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bk", [16, 32])
def test_triton_mma_flush_gram_only(dtype, bk, gen):
    # the Gram alone (tau=0: no recompute) with the MMA accumulator flushed every F BK-steps: chunks
    # shorter than F steps, exactly F, multiples of F, F*m + r plus a K tail, a tail alone; any lost,
    # doubled or misplaced partial is a relative error far above the bar
    if not _triton_ok():
        pytest.skip("triton not importable")
    from vitplast_kernels.backends.triton import all_pairs as tap

    f = tap.flush_steps(bk)
    assert f >= 2 and f * bk <= tap.MMA_FLUSH_K
    step = f * bk
    for k, splits in ((bk - 1, 1), (3 * bk, 1), (step, 1), (2 * step, 1), (2 * step + bk + 5, 1),
                      (2 * step + bk + 5, 3), (5 * step, 2)):
        a = rand((9, k), dtype, gen)
        got = _run(a, "triton", splits=splits, config=(16, bk, 1, 1), tau=0.0)
        assert_matrix_exact(got, a, f"triton Gram only, K={k} BK={bk} F={f} splits={splits} {dtype}")
    assert tap.gram_eps(a) > 0


def test_index_arithmetic_at_70k_rows():
    # N = 70,000 rows (planned, not run: the output alone is 20 GB): every grid within CUDA's per-axis
    # limits (rows on axis 0), workspace and output offsets past 2^31 (int32 would wrap)
    if triton is None:
        pytest.skip("triton not importable")
    n, k = 70_000, 257 * 384
    bm, bk = tap._fitting(n)[0][:2]
    tiles = tap.num_tiles_of(n, bm)
    s, _ = tap._splits(tiles, k, bk, torch.device("cpu"), tap.splits_for(tiles, 132))
    grids = tap.launch_grids(n, bm, s, tap.RECOMPUTE_JB)
    assert grids["recompute"] == (n, math.ceil(n / tap.RECOMPUTE_JB)) and grids["partial"] == (tiles, s)
    for name, grid in grids.items():
        assert all(1 <= size <= limit for size, limit in zip(grid, tap.GRID_AXIS_MAX, strict=True)), name
    ext = tap.index_extents(n, k, k, bm, s)
    assert ext["workspace"] == s * tiles * bm * bm - 1 >= 2**31 and ext["out"] == n * n - 1 >= 2**31
    assert max(ext.values()) < 2**63
    with pytest.raises(ValueError, match="recompute launch: grid axis 1"):
        tap.launch_grids(600_000, bm, s, tap.RECOMPUTE_JB)  # more row blocks than axis 1 takes
    assert tap._splits(1, 10**9, bk, torch.device("cpu"), 10**6)[0] <= tap.GRID_AXIS_MAX[1]


def test_kernel_offsets_are_int64_past_2_31():
    # the offset helpers the Gram kernels use, evaluated by a kernel for the last tile at N = 70,000
    # from int32 ids (as tl.program_id gives them): exact where int32 arithmetic would wrap
    if not _triton_ok():
        pytest.skip("triton not importable")
    bm, splits = 128, 3
    tiles = tap.num_tiles_of(70_000, bm)
    out = torch.zeros(2, dtype=torch.int64, device="cuda" if torch.cuda.is_available() else "cpu")
    _offset_probe[(1,)](out, splits - 1, tiles - 1, tiles, BM=bm)
    assert out.tolist() == [tap.index_extents(70_000, 1, 1, bm, splits)["workspace"], (tiles - 1) * bm * bm]
    assert out[0] >= 2**31


if triton is not None:

    @triton.jit
    def _offset_probe(out_ptr, s, t, num_tiles, BM: tl.constexpr):
        tl.store(out_ptr, tap._ws_offset(s.to(tl.int32), t.to(tl.int32), num_tiles, BM) + (BM * BM - 1))
        tl.store(out_ptr + 1, tap._tile_offset(t.to(tl.int32), BM))


@pytest.mark.slow
def test_cpu_threshold_edge_long_rows(gen):
    # every pair just above the trust threshold at ViT-Small size: the Gram's worst trusted case
    n, k = 24, 257 * 384
    tau = numerics.reliability_threshold(numerics.gram_error(k, k // ap.CPU_CHUNK, numerics.C_CPU))
    scale = math.sqrt(1 / (1.5 * tau) - 1)  # r = S_ij / (n_i + n_j) ~= 1 / (1 + scale^2) = 1.5 tau
    a = torch.randn(k, generator=gen) * scale + torch.randn(n, k, generator=gen)
    sq, unreliable, _ = ap._gram_sq(a, ap.CPU_CHUNK)
    assert unreliable.sum() == 0, "the edge case should be resolved by the Gram alone"
    gram_only = sq.float().tril(-1)
    assert_matrix_exact(gram_only + gram_only.T, a, "cpu Gram at the threshold edge")
    assert ap._probe_wants_centring(a, ap.CPU_CHUNK)  # ... where the probe centres first
    assert not ap._probe_wants_centring(a - a[:1], ap.CPU_CHUNK)
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
    a = _near_duplicates(13, 90, torch.bfloat16, gen, offset=10.0)
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
    assert_matrix_exact(vk.all_pair_sq_distances(a, backend="triton"), a, f"cuda {dtype}")  # ref on GPU
    assert torch.equal(vk.all_pair_sq_distances(a), vk.all_pair_sq_distances(a))


# ---------------------------------------------------------------------------------------------
# pairs="all" in the capture and in pairwise_plasticity
# ---------------------------------------------------------------------------------------------

COMPS = ("LN1", "MHA", "LN2", "FC1", "FC2")


@pytest.fixture(scope="module")
def small_vit():
    timm = pytest.importorskip("timm")
    torch.manual_seed(3)
    return timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, pretrained=False).eval()


def _all_rates64(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N, ...) input and output -> (N(N-1)/2,) float64 rates over i < j, by plain loops."""
    x, y = x.double().flatten(1), y.double().flatten(1)
    out = []
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            out.append(((y[i] - y[j]).square().sum() / (x[i] - x[j]).square().sum()).sqrt())
    return torch.stack(out)


def _jackknife64(rates: torch.Tensor, n: int) -> float:
    """Var of the mean rate by leaving out each sequence in turn (NaN rates excluded), float64."""
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    loo = []
    for k in range(n):
        keep = torch.tensor([k not in p for p in pairs]) & torch.isfinite(rates)
        loo.append(rates[keep].mean())
    loo = torch.stack(loo)
    return float((n - 1) / n * (loo - loo.mean()).square().sum())


def _reference_in_situ(model, images):
    mods = {"LN1": [b.norm1 for b in model.blocks], "MHA": [b.attn for b in model.blocks],
            "LN2": [b.norm2 for b in model.blocks], "FC1": [b.mlp.fc1 for b in model.blocks],
            "FC2": [b.mlp.fc2 for b in model.blocks]}
    store, handles = {}, []
    for c, ms in mods.items():
        for l, m in enumerate(ms):
            def hook(mod, a, o, c=c, l=l):
                store[(c, l)] = (a[0].detach().clone(), o.detach().clone())

            handles.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(images)
    for h in handles:
        h.remove()
    return {c: [store[(c, l)] for l in range(len(ms))] for c, ms in mods.items()}


def test_capture_all_pairs_matches_float64(small_vit, gen):
    n = 7
    images = torch.randn(n, 3, 32, 32, generator=gen)
    images[4] = images[1]  # an identical pair: excluded and counted
    with vk.capture(small_vit, pairs="all") as acts, torch.no_grad():
        small_vit(images)
    res = vk.pairwise_plasticity(acts)
    assert res.meta["pairs"] == "all" and res.stat_fields[-1] == "var_w"
    ref = _reference_in_situ(small_vit, images)
    for c in COMPS:
        for l, (x, y) in enumerate(ref[c]):
            rates = _all_rates64(x, y)
            ok = torch.isfinite(rates)
            assert res.n_pairs(c)[l] == ok.sum() == n * (n - 1) // 2 - 1, c
            assert res.n_identical(c)[l] == 1
            assert res.mean(c)[l].item() == pytest.approx(rates[ok].mean().item(), rel=2e-5), (c, l)
            assert res.std(c)[l].item() == pytest.approx(rates[ok].std().item(), rel=1e-3, abs=1e-7)
            sem = math.sqrt(_jackknife64(rates, n))
            assert res.sem(c)[l].item() == pytest.approx(sem, rel=1e-3, abs=1e-9), (c, l)
            half = (res.ci(c)[l, 1] - res.ci(c)[l, 0]).item() / 2
            assert half == pytest.approx(1.959963984540054 * sem, rel=1e-3, abs=1e-9)


def test_capture_all_pairs_two_batches(small_vit, gen):
    a, b = torch.randn(4, 3, 32, 32, generator=gen), torch.randn(5, 3, 32, 32, generator=gen)
    with vk.capture(small_vit, pairs="all") as acts, torch.no_grad():
        small_vit(a)
        small_vit(b)
    res = vk.pairwise_plasticity(acts)
    ra, rb = _reference_in_situ(small_vit, a), _reference_in_situ(small_vit, b)
    for c in COMPS:
        assert (res.n_pairs(c) == 6 + 10).all()
        for l in range(2):
            r1, r2 = _all_rates64(*ra[c][l]), _all_rates64(*rb[c][l])
            mean = torch.cat([r1, r2]).mean().item()
            assert res.mean(c)[l].item() == pytest.approx(mean, rel=2e-5)
            var = (6**2 * _jackknife64(r1, 4) + 10**2 * _jackknife64(r2, 5)) / 16**2
            assert res.sem(c)[l].item() == pytest.approx(math.sqrt(var), rel=1e-3)


def test_all_pairs_with_two_sequences_equals_halves(small_vit, gen):
    images = torch.randn(2, 3, 32, 32, generator=gen)
    results = {}
    for pairs in ("all", "halves"):
        with vk.capture(small_vit, pairs=pairs) as acts, torch.no_grad():
            small_vit(images)
        results[pairs] = vk.pairwise_plasticity(acts)
    for c in COMPS:
        assert torch.equal(results["all"].n_pairs(c), results["halves"].n_pairs(c))
        assert torch.allclose(results["all"].mean(c), results["halves"].mean(c), rtol=1e-6)
        assert results["all"].ci(c).isnan().all() and results["halves"].ci(c).isnan().all()


@pytest.mark.slow
def test_pairwise_plasticity_tensors_and_u_statistic_error(gen):
    """The jackknife standard error matches the spread of the estimate over independent batches; the
    naive std / sqrt(pairs) is far too small (pairs share sequences)."""
    n, reps = 16, 80
    w = torch.randn(6, 6, generator=gen)
    means, sems, naive = [], [], []
    for _ in range(reps):
        x = torch.randn(n, 6, generator=gen) * torch.rand(n, 1, generator=gen) * 3
        res = vk.pairwise_plasticity({"f": (x, torch.tanh(x @ w))}, pairs="all")
        means.append(res.mean("f").item())
        sems.append(res.sem("f").item())
        naive.append(res.std("f").item() / math.sqrt(res.n_pairs("f").item()))
    spread = torch.tensor(means).std().item()
    assert 0.7 < torch.tensor(sems).mean().item() / spread < 1.5
    assert torch.tensor(naive).mean().item() / spread < 0.5
    merged = vk.pairwise_plasticity({"f": (x, torch.tanh(x @ w))}, pairs="all")
    assert merged.to_dict()["stat_fields"][-1] == "var_w"
    back = vk.PlasticityResult.from_dict(merged.to_dict())
    assert torch.equal(back.sem("f"), merged.sem("f"))


def test_all_pairs_errors():
    with pytest.raises(ValueError, match="pairs='all' needs a batch of at least 2 sequences"):
        vk.pairwise_plasticity({"f": (torch.randn(1, 4), torch.randn(1, 4))}, pairs="all")
