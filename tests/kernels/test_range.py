"""The whole float32 range: activations scaled by 1e30, 1e-30, 1e-38 (subnormal inputs) and rows of mixed
scales, on every CPU-runnable backend (Triton interpreted) and, with a GPU, the GPU ones.

Where the true distance is a finite float32 number, distances are within 1e-6 relative of the float64
reference and rates are right, although the squares (1e62 or 1e-76 per element) leave float32's range;
the measurement layer's float64 sums are right (float32 inputs: to 1e-12), so 1e-30-scaled pairs are
not "identical".
"""

from __future__ import annotations

import pytest
import torch
from helpers import lane_pattern_inputs, rand

import vitplast_kernels as vk
from vitplast_kernels.ops.all_pairs import all_pair_sq_sums
from vitplast_kernels.ops.paired import grouped_sq_sums, pair_sq_sums

SCALES = {"1e30": 1e30, "1e-30": 1e-30, "1e-38": 1e-38}
DIST_RTOL = 1e-6  # distances (and rates) against float64
# the float64 sums against float64 (bfloat16 on CPU: squares of in-range blocks summed in float32 lanes)
SUM_RTOL = {torch.float32: 1e-12, torch.bfloat16: 1e-6}
GPU = torch.cuda.is_available()
BACKENDS = [
    "cpu", "torch", "triton",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="needs CUDA")]),
]
ALL_PAIRS_BACKENDS = ["cpu", "torch", "triton"]
# bfloat16 has float32's exponent range; float16 (max 65504, least subnormal 6e-8) cannot hold these
DTYPES = (torch.float32, torch.bfloat16)

# the interpreter runs the kernels in numpy, which warns where a float32 Gram overflows (the pairs it
# marks are recomputed in float64)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _device(backend: str) -> str:
    return "cuda" if backend in ("cuda", "triton") and GPU else "cpu"


def _scaled(shape, dtype, gen, scale, device) -> torch.Tensor:
    """float32 normals times ``scale`` (a float, or one per row), rounded once to ``dtype``."""
    x = rand(shape, torch.float32, gen).double()
    s = torch.as_tensor(scale, dtype=torch.float64).reshape((-1,) + (1,) * (len(shape) - 1))
    return (x * s).to(dtype).to(device)


def _mixed_scales(rows: int) -> list[float]:
    return [(1e30, 1e-30, 1e-38, 1.0, 3e-20, 1e19)[i % 6] for i in range(rows)]


def _interpreter_misreads(backend: str, x: torch.Tensor) -> bool:
    """Triton's interpreter (3.8) converts bfloat16 subnormals to float32 wrongly (its bf16 -> fp32
    cast mishandles them; compiled kernels use cvt.f32.bf16, which is exact): such cases only run on
    a GPU."""
    tiny = torch.finfo(torch.float32).tiny
    return (backend == "triton" and not GPU and x.dtype == torch.bfloat16
            and bool(((x != 0) & (x.abs() < tiny)).any()))


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert torch.isfinite(got).all(), f"non-finite values: {got}"
    return ((got - want).abs() / want.abs()).max().item()


def _cases(dtype, gen, device, shape=(6, 9, 40)):
    """(name, x, y, per-row scale (rows, 1, ...) float64): pairs of one scale, and pairs whose scale
    changes from row to row."""
    scales = [(name, [s] * shape[0]) for name, s in SCALES.items()] + [("mixed", _mixed_scales(shape[0]))]
    return [(name, _scaled(shape, dtype, gen, s, device), _scaled(shape, dtype, gen, s, device),
             torch.tensor(s, dtype=torch.float64, device=device).reshape((-1,) + (1,) * (len(shape) - 1)))
            for name, s in scales]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_paired_distances_and_sums_over_the_range(backend, dtype, gen):
    for name, x, y, _ in _cases(dtype, gen, _device(backend)):
        if _interpreter_misreads(backend, x):
            continue
        ref = vk.pair_sq_distances_reference(x, y)
        assert ref.gt(0).all() and ref.sqrt().lt(torch.finfo(torch.float32).max).all(), name
        what = f"{backend} {dtype} {name}"
        assert _rel_err(pair_sq_sums(x, y, backend=backend), ref) <= SUM_RTOL[dtype], what
        assert _rel_err(vk.pair_distances(x, y, backend=backend), ref.sqrt()) <= DIST_RTOL, what


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_paired_ratios_over_the_range(backend, dtype, gen):
    for name, x, y, s in _cases(dtype, gen, _device(backend)):
        if _interpreter_misreads(backend, x):
            continue
        what = f"{backend} {dtype} {name}"
        # a pair compared with itself: rate 1 exactly where the squares leave float32 (1e62, 1e-76)
        assert vk.pair_ratios(x, y, x, y, backend=backend).eq(1).all(), what
        # f = c * identity with c a power of two (exact in every dtype): rate c
        assert vk.pair_ratios(4 * x, 4 * y, x, y, backend=backend).eq(4).all(), what
        # a component that brings every row to unit scale (rates ~ 1 / scale), against float64
        fx, fy = torch.tanh(x.double() / s).to(dtype), torch.tanh(y.double() / s).to(dtype)
        got = vk.pair_ratios(fx, fy, x, y, backend=backend)
        assert _rel_err(got, vk.pair_ratios_reference(fx, fy, x, y)) <= DIST_RTOL, what


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_blocks_with_zero_and_out_of_range_lanes(backend, dtype, gen):
    # the 16-bit kernels check each block's float32 lane sums (and, only for a block out of range, its
    # zero lanes): identical lanes, +0 against -0, 2^70 and 2^-40 differences, against float64
    x, y = lane_pattern_inputs(dtype, _device(backend), gen, rows=6)
    if _interpreter_misreads(backend, x):
        pytest.skip("bfloat16 subnormals: Triton's interpreter misreads them")
    ref = vk.pair_sq_distances_reference(x, y)
    assert ref.gt(0).all()
    assert _rel_err(pair_sq_sums(x, y, backend=backend), ref) <= SUM_RTOL[dtype], f"{backend} {dtype}"
    assert _rel_err(vk.pair_distances(x, y, backend=backend), ref.sqrt()) <= DIST_RTOL, f"{backend} {dtype}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_sums_over_the_range(backend, gen):
    device = _device(backend)
    mixed = _mixed_scales(4)
    xs = [_scaled((4, 30), torch.float32, gen, s, device) for s in (1e30, 1e-38, mixed)]
    ys = [_scaled((4, 30), torch.float32, gen, s, device) for s in (1e30, 1e-38, mixed)]
    got = grouped_sq_sums(xs, ys, backend=backend)
    assert got.dtype == torch.float64
    for g, (x, y) in enumerate(zip(xs, ys, strict=True)):
        want = vk.pair_sq_distances_reference(x, y)
        assert _rel_err(got[g], want) <= SUM_RTOL[torch.float32], f"{backend} group {g}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_squares_keep_float32_range(backend, gen):
    # pair_sq_distances is float32: squares past 3.4e38 are inf, under 1.4e-45 zero (documented)
    device = _device(backend)
    big, tiny = (_scaled((3, 50), torch.float32, gen, s, device) for s in (1e30, 1e-30))
    assert vk.pair_sq_distances(big, -big, backend=backend).isinf().all()
    assert vk.pair_sq_distances(tiny, -tiny, backend=backend).eq(0).all()
    assert vk.pair_distances(tiny, -tiny, backend=backend).gt(0).all()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL_PAIRS_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_pairs_over_the_range(backend, dtype, gen):
    device = _device(backend)
    off = ~torch.eye(7, dtype=torch.bool)
    for name, x, _, _ in _cases(dtype, gen, device, shape=(7, 5, 60)):
        if _interpreter_misreads(backend, x):
            continue
        ref = vk.all_pair_sq_distances_reference(x).cpu()
        what = f"{backend} {dtype} {name}"
        sums = all_pair_sq_sums(x, backend=backend).cpu()
        assert sums.diagonal().eq(0).all(), what
        assert _rel_err(sums[off], ref[off]) <= DIST_RTOL, what  # squares: 1e-6 is also the distance bar
        dist = vk.all_pair_distances(x, backend=backend).cpu()
        assert _rel_err(dist[off], ref.sqrt()[off]) <= DIST_RTOL, what
        rates = vk.all_pair_ratios(x, x, backend=backend).cpu()
        assert rates[off].eq(1).all() and rates.diagonal().isnan().all(), what


@pytest.mark.parametrize("pairs", ["halves", "all"])
def test_tiny_activations_are_measured_not_identical(pairs, gen):
    # the capture / pairwise_plasticity path: 1e-30-scaled activations give real rates, no pair
    # counted as identical
    x = _scaled((8, 5, 16), torch.float32, gen, 1e-30, "cpu")
    w = rand((16, 16), torch.float32, gen).double()
    fx = (x.double() @ w).to(torch.float32)  # a linear component: rates of order 1
    res = vk.pairwise_plasticity({"lin": (x, fx)}, pairs=pairs)
    n_pairs = 4 if pairs == "halves" else 28
    assert res.n_pairs("lin").item() == n_pairs and res.n_identical("lin").item() == 0
    assert res.n_nonfinite("lin").item() == 0
    if pairs == "halves":
        want = vk.pair_ratios_reference(fx[4:], fx[:4], x[4:], x[:4]).mean().item()
        assert res.mean("lin").item() == pytest.approx(want, rel=1e-6)


def test_capture_of_a_tiny_scale_model_counts_no_identical_pairs(gen):
    # a block whose activations all sit near 1e-30: float32 squares (1e-60) would vanish, the capture's
    # float64 per-pair sums do not, and no pair is counted as identical
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32, bias=False)
            self.fc2 = torch.nn.Linear(32, 16, bias=False)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([Block()])
    model.forward = lambda x: model.blocks[0](x)
    model.eval()
    x = _scaled((8, 5, 16), torch.float32, gen, 1e-30, "cpu")
    components = {"FC1": "blocks.*.fc1", "FC2": "blocks.*.fc2"}
    with vk.capture(model, components=components) as acts, torch.no_grad():
        model(x)
    res = vk.pairwise_plasticity(acts)
    for comp in ("FC1", "FC2"):
        assert res.n_identical(comp).item() == 0 and res.n_pairs(comp).item() == 4, comp
        assert torch.isfinite(res.mean(comp)).all(), comp
