"""GPU backends (``triton``, ``cuda``) of the paired reductions on a CUDA device; skipped without one.

Both backends against the float64 reference (single, grouped, strided), a tensor of more than 2^31
elements, bitwise determinism, ``opcheck``, ``torch.compile(fullgraph=True)`` and the ``auto`` choice.
"""

from __future__ import annotations

import pytest
import torch
from helpers import DTYPES, SQ_RTOL, assert_close_rel, rand, strided_views

import vitplast_kernels as vk

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

GPU_BACKENDS = ["triton", "cuda"]


def _need(backend: str) -> None:
    if backend == "cuda" and not vk.cuda_extension_available():
        pytest.fail("the CUDA extension vitplast_kernels._C_cuda is not built (VITPLAST_BUILD_CUDA=1)")


def _ref(a, b):
    return vk.pair_sq_distances_reference(a, b)


def _g():
    return torch.Generator().manual_seed(1234)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7, 33), (5, 4099), (32, 257, 1280), (2, 3, 1_000_003)])
def test_matches_reference(backend, dtype, shape):
    _need(backend)
    gen = _g()
    a, b = rand(shape, dtype, gen, "cuda"), rand(shape, dtype, gen, "cuda")
    got = vk.pair_sq_distances(a, b, backend=backend)
    assert got.device == a.device and got.dtype == torch.float32 and got.shape == (shape[0],)
    assert_close_rel(got, _ref(a, b), SQ_RTOL[dtype], f"{backend} {dtype} {shape}")


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_and_unaligned_views(backend, dtype):
    _need(backend)
    gen = _g()
    for name, a, b in strided_views((3, 17, 130), dtype, gen, "cuda"):
        assert_close_rel(vk.pair_sq_distances(a, b, backend=backend), _ref(a, b), SQ_RTOL[dtype], name)
    flat = rand((4 * 1001 + 1,), dtype, gen, "cuda")
    a, b = flat[1:2003].view(2, 1001), flat[2003:4005].view(2, 1001)  # odd offsets: scalar path
    assert_close_rel(vk.pair_sq_distances(a, b, backend=backend), _ref(a, b), SQ_RTOL[dtype], "unaligned")


def _vit_group(dtype, blocks=3, pairs=4):
    gen = _g()
    xs, ys = [], []
    for _ in range(blocks):
        for w in (1280,) * 5 + (5120,) * 2:
            t = rand((2 * pairs, 257, w), dtype, gen, "cuda")
            xs.append(t[:pairs])
            ys.append(t[pairs:])
    return xs, ys


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_matches_reference(backend, dtype):
    _need(backend)
    xs, ys = _vit_group(dtype)
    gen = _g()
    xs.append(rand((4, 3, 130), dtype, gen, "cuda")[:, :, 1:129])  # strided member
    ys.append(rand((4, 3, 128), dtype, gen, "cuda"))
    got = vk.pair_sq_distances_grouped(xs, ys, backend=backend)
    assert got.shape == (len(xs), 4)
    for g, (x, y) in enumerate(zip(xs, ys, strict=True)):
        assert_close_rel(got[g], _ref(x, y), SQ_RTOL[dtype], f"{backend} grouped[{g}]")


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_grouped_many_small_tensors(backend):
    # hundreds of tensors of a few tasks each between two wide ones: many tensors share one window of
    # the CUDA kernel's task -> tensor hints, and every output row is summed by its last block
    _need(backend)
    gen = _g()
    widths = [1 + (7 * g) % 300 for g in range(400)]
    xs = [rand((3, 1000, 41), torch.bfloat16, gen, "cuda")]
    xs += [rand((3, w), torch.bfloat16, gen, "cuda") for w in widths]
    xs += [rand((3, 2, 70_000), torch.bfloat16, gen, "cuda")]
    ys = [rand(tuple(x.shape), torch.bfloat16, gen, "cuda") for x in xs]
    got = vk.pair_sq_distances_grouped(xs, ys, backend=backend)
    want = torch.stack([_ref(x, y) for x, y in zip(xs, ys, strict=True)])
    assert_close_rel(got, want, SQ_RTOL[torch.bfloat16], f"{backend} many small")
    assert torch.equal(vk.pair_sq_distances_grouped(xs, ys, backend=backend), got)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_bitwise_deterministic(backend):
    _need(backend)
    gen = _g()
    a = rand((32, 257, 1280), torch.bfloat16, gen, "cuda")
    b = rand((32, 257, 1280), torch.bfloat16, gen, "cuda")
    xs, ys = _vit_group(torch.bfloat16, blocks=2)
    first = vk.pair_sq_distances(a, b, backend=backend)
    first_g = vk.pair_sq_distances_grouped(xs, ys, backend=backend)
    for _ in range(3):
        assert torch.equal(vk.pair_sq_distances(a, b, backend=backend), first)
        assert torch.equal(vk.pair_sq_distances_grouped(xs, ys, backend=backend), first_g)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_beyond_2_to_the_31_elements(backend):
    _need(backend)
    rows, k = 5, 2**29 + 17  # 2.68e9 elements per tensor: the last rows start past 2^31
    free, _ = torch.cuda.mem_get_info()
    if free < 14 * 2**30:
        pytest.skip("needs ~14 GiB of free GPU memory")
    a = torch.randn((rows, k), device="cuda", dtype=torch.bfloat16)
    b = torch.zeros((rows, k), device="cuda", dtype=torch.bfloat16)
    a[-1, -5:] = 1000.0  # only the very last elements tell whether offsets wrapped
    expect = torch.stack([a[r].double().square().sum() for r in range(rows)])
    got = vk.pair_sq_distances(a, b, backend=backend)
    assert_close_rel(got, expect, SQ_RTOL[torch.bfloat16], f"{backend} > 2^31")
    small = torch.ones((rows, 10), device="cuda", dtype=torch.bfloat16)
    got_g = vk.pair_sq_distances_grouped([small, a], [small * 0, b], backend=backend)
    assert_close_rel(got_g[1], expect, SQ_RTOL[torch.bfloat16], f"{backend} grouped > 2^31")
    assert torch.equal(got_g[0], torch.full((rows,), 10.0, device="cuda"))


def test_opcheck():
    gen = _g()
    a, b = rand((3, 5, 40), torch.float32, gen, "cuda"), rand((3, 5, 40), torch.float32, gen, "cuda")
    c, d = rand((3, 9), torch.float32, gen, "cuda"), rand((3, 9), torch.float32, gen, "cuda")
    vk.pair_sq_distances(a, b, backend="triton")  # registers the Triton ops
    torch.library.opcheck(torch.ops.vitplast.pair_sq_distances_triton.default, (a, b))
    torch.library.opcheck(torch.ops.vitplast.pair_sq_distances_grouped_triton.default, ([a, c], [b, d]))
    if vk.cuda_extension_available():
        torch.library.opcheck(torch.ops.vitplast.pair_sq_distances.default, (a, b))
        torch.library.opcheck(torch.ops.vitplast.pair_sq_distances_grouped.default, ([a, c], [b, d]))


@pytest.mark.parametrize("backend", [*GPU_BACKENDS, "auto"])
def test_torch_compile_fullgraph(backend):
    _need(backend)
    gen = _g()
    a, b = rand((4, 9, 64), torch.bfloat16, gen, "cuda"), rand((4, 9, 64), torch.bfloat16, gen, "cuda")
    xs, ys = [a, a[:, :3]], [b, b[:, :3]]

    def f(a, b, xs, ys):
        return vk.pair_distances(a, b, backend=backend), vk.pair_sq_distances_grouped(xs, ys, backend=backend)

    torch._dynamo.reset()
    got, got_g = torch.compile(f, fullgraph=True)(a, b, xs, ys)
    want, want_g = f(a, b, xs, ys)
    assert_close_rel(got, want, 1e-6, "compiled single")
    assert_close_rel(got_g, want_g, 1e-6, "compiled grouped")


def test_auto_is_a_fixed_plan_unless_autotuning_is_asked_for(monkeypatch):
    from vitplast_kernels.backends import cuda as cuda_backend
    from vitplast_kernels.backends import resolve
    from vitplast_kernels.backends.registry import usable

    monkeypatch.delenv(cuda_backend.ENV_OVERRIDE, raising=False)
    monkeypatch.delenv(cuda_backend.ENV_AUTOTUNE, raising=False)
    names = [n for n in GPU_BACKENDS if usable(n)]
    assert resolve("auto", torch.device("cuda")).name == names[0]  # "cuda" when built: no timing
    assert cuda_backend.auto_timings() == {}
    monkeypatch.setenv(cuda_backend.ENV_OVERRIDE, "triton")
    assert resolve("auto", torch.device("cuda")).name == "triton"
    monkeypatch.setenv(cuda_backend.ENV_OVERRIDE, "nope")
    with pytest.raises(ValueError, match="VITPLAST_GPU_BACKEND"):
        resolve("auto", torch.device("cuda"))
