"""float64 end to end: the ops take float64 (on the PyTorch path, which backend="auto" picks for it), give
float64 results equal to the float64 reference, pass gradcheck, and a capture of ``model.double()``
measures; named kernel backends refuse float64 with an actionable error; complex inputs are named."""

from __future__ import annotations

import pytest
import torch

import vitplast_kernels as vk
from vitplast_kernels.backends import resolve
from vitplast_kernels.testing.reference import (
    all_pair_sq_distances_reference,
    pair_ratios_reference,
    pair_sq_distances_reference,
)

F64 = torch.float64


def _pair(gen, shape=(6, 5, 7)):
    return torch.randn(shape, dtype=F64, generator=gen), torch.randn(shape, dtype=F64, generator=gen)


def test_paired_ops_match_the_float64_reference(gen):
    a, b = _pair(gen)
    a[2] = b[2]  # an identical pair: distance 0, no rate
    want = pair_sq_distances_reference(a, b)
    for backend in ("auto", "torch"):
        got = vk.pair_sq_distances(a, b, backend=backend)
        assert got.dtype == F64
        torch.testing.assert_close(got, want, rtol=1e-15, atol=0)
    torch.testing.assert_close(vk.pair_distances(a, b), want.sqrt(), rtol=1e-15, atol=0)
    fx, fy = _pair(gen, (6, 3))
    torch.testing.assert_close(vk.pair_ratios(fx, fy, a, b), pair_ratios_reference(fx, fy, a, b),
                               rtol=1e-15, atol=0, equal_nan=True)
    grouped = vk.pair_sq_distances_grouped([a, fx], [b, fy])
    assert grouped.dtype == F64
    torch.testing.assert_close(grouped[1], pair_sq_distances_reference(fx, fy), rtol=1e-15, atol=0)


def test_all_pairs_ops_match_the_float64_reference(gen):
    a, _ = _pair(gen)
    got = vk.all_pair_sq_distances(a)
    assert got.dtype == F64
    torch.testing.assert_close(got, all_pair_sq_distances_reference(a), rtol=1e-15, atol=0)
    assert vk.all_pair_ratios(a[:, :2], a).dtype == F64


def test_auto_routes_float64_to_the_torch_path_on_every_device():
    assert resolve("auto", torch.device("cpu"), dtype=F64).name == "torch"
    assert resolve("auto", torch.device("cpu"), op="all_pairs", dtype=F64).name == "torch"
    assert resolve("auto", torch.device("cuda"), dtype=F64).name == "torch"  # decided before the device


@pytest.mark.skipif(not vk.cpu_extension_available(), reason="needs the C++ CPU extension")
def test_a_named_kernel_backend_refuses_float64_with_a_remedy(gen):
    a, b = _pair(gen)
    with pytest.raises(TypeError, match=r"backend='cpu' takes float32, float16, bfloat16 inputs, got "
                                        r"torch.float64: use backend='auto' or 'torch'"):
        vk.pair_sq_distances(a, b, backend="cpu")


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_inputs_are_named_complex(dtype):
    z = torch.zeros(4, 3, dtype=dtype)
    with pytest.raises(TypeError, match=r"a must be .* got torch.complex.*complex activations.*view_as_real"):
        vk.pair_sq_distances(z, z)


def test_gradcheck_paired_and_all_pairs(gen):
    a, b = _pair(gen, (4, 3, 2))
    a.requires_grad_()
    b.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: vk.pair_distances(x, y), (a, b))
    assert torch.autograd.gradcheck(lambda x, y: vk.pair_sq_distances_grouped([x, y], [y, x]), (a, b))
    assert torch.autograd.gradcheck(lambda x: vk.all_pair_sq_distances(x), (a,))
    assert torch.autograd.gradgradcheck(lambda x, y: vk.pair_sq_distances(x, y), (a, b))


@pytest.mark.parametrize("pairs", ["halves", "all"])
def test_capture_of_a_double_model_matches_the_float64_reference(gen, pairs):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=1, num_classes=0).eval().double()
    x = torch.randn(6, 3, 32, 32, dtype=F64, generator=gen)
    io = {}
    block = model.blocks[0]
    hook = block.norm1.register_forward_hook(lambda m, args, out: io.update(ln1=(args[0], out)))
    with vk.capture(model, pairs=pairs) as cap, torch.no_grad():
        model(x)
    hook.remove()
    res = cap.result()
    assert res.stats.dtype == F64 and res.components[0] == "LN1"
    inp, out = io["ln1"]
    if pairs == "halves":
        rates = pair_ratios_reference(out[:3], out[3:], inp[:3], inp[3:])
    else:
        rows, cols = torch.triu_indices(6, 6, 1)
        rates = pair_ratios_reference(out[rows], out[cols], inp[rows], inp[cols])
    assert res.stats[0, 0, 0].item() == rates.numel()
    torch.testing.assert_close(res.stats[0, 0, 1], rates.sum(), rtol=1e-13, atol=0)


def test_a_capture_names_the_module_of_an_unsupported_activation():
    """Not the op's internal argument (``a[0]``): the module whose activation has the dtype."""
    model = torch.nn.Sequential(torch.nn.Identity())
    with vk.capture(model, components={"LN1": "0"}) as cap:
        with pytest.raises(TypeError, match=r"capture: the activation of 0 must be .* got torch.complex64 "
                                            r"\(complex activations"):
            model(torch.zeros(4, 3, dtype=torch.complex64))
    assert cap.attached is False
