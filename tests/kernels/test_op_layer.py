"""Errors, the C++ extension's messages and runtime, and torch.compile (opcheck of every registered
op: tests/kernels/test_gradients.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import rand

import vitplast_kernels as vk
from vitplast_kernels.ops import paired as op_paired


@pytest.mark.parametrize(
    "a, b, exc, match",
    [
        (torch.zeros(4, 3), torch.zeros(4, 4), ValueError, "b must have the same shape as a"),
        (torch.zeros(4), torch.zeros(4), ValueError, "a must have at least 2 dims"),
        (torch.zeros(0, 3), torch.zeros(0, 3), ValueError, "a has an empty batch"),
        (torch.zeros(4, 3, dtype=torch.int64), torch.zeros(4, 3), TypeError, "a must be float32"),
        (torch.zeros(4, 3), torch.zeros(4, 3, dtype=torch.float16), TypeError, "b has dtype"),
        ([[1.0]], torch.zeros(1, 1), TypeError, "a must be a torch.Tensor"),
        (torch.zeros(4, 3, dtype=torch.complex64), torch.zeros(4, 3, dtype=torch.complex64), TypeError,
         "float32, float16, bfloat16 or float64, got torch.complex64 \\(complex activations"),
    ],
)
def test_bad_input_errors_name_the_argument(a, b, exc, match):
    with pytest.raises(exc, match=match):
        vk.pair_sq_distances(a, b)


def test_unknown_backend_and_device_mismatch():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="backend must be one of"):
        vk.pair_sq_distances(x, x, backend="nope")
    with pytest.raises(ValueError, match="x has 2 rows but fx has 3"):
        vk.pair_ratios(torch.zeros(3, 4), torch.zeros(3, 4), x, x)
    with pytest.raises(ValueError, match="a and b must hold as many tensors"):
        vk.pair_sq_distances_grouped([x], [])
    with pytest.raises(ValueError, match=r"a\[1\] has 3 rows"):
        vk.pair_sq_distances_grouped([x, torch.zeros(3, 4)], [x, torch.zeros(3, 4)])
    with pytest.raises(TypeError, match="a must be a sequence of tensors"):
        vk.pair_sq_distances_grouped(torch.zeros(3, 5, 4), torch.zeros(3, 5, 4))  # not 3 groups of (5, 4)


def _group(n=4):
    return [torch.randn(3, 5, 2 + g) for g in range(n)], [torch.randn(3, 5, 2 + g) for g in range(n)]


@pytest.mark.parametrize("spoil, exc, match", [
    (lambda a, b: b.__setitem__(2, b[2].to(torch.float16)), TypeError, r"b\[2\] has dtype torch.float16"),
    (lambda a, b: a.__setitem__(3, a[3].to(torch.float64)), TypeError, r"a\[3\] has dtype torch.float64"),
    (lambda a, b: a.__setitem__(3, a[3].to(torch.int32)), TypeError, r"a\[3\] must be float32"),
    (lambda a, b: b.__setitem__(1, b[1][:, :4]), ValueError, r"b\[1\] must have the same shape as a\[1\]"),
    (lambda a, b: (a.__setitem__(2, a[2][:2]), b.__setitem__(2, b[2][:2])), ValueError, r"a\[2\] has 2 rows"),
    (lambda a, b: (a.__setitem__(1, a[1][:, 0, 0]), b.__setitem__(1, b[1][:, 0, 0])), ValueError,
     r"a\[1\] must have at least 2 dims"),
    (lambda a, b: (a.__setitem__(3, a[3].to("meta")), b.__setitem__(3, b[3].to("meta"))), ValueError,
     r"a\[3\] is on the meta device"),
    (lambda a, b: b.__setitem__(0, b[0].numpy()), TypeError, r"b\[0\] must be a torch.Tensor"),
    (lambda a, b: (a.__setitem__(0, a[0][:0]), b.__setitem__(0, b[0][:0])), ValueError,
     r"a\[0\] has an empty batch"),
])
def test_grouped_errors_name_the_tensor(spoil, exc, match):
    # the quick whole-group check only decides whether the per-tensor checks run: each defect is
    # still reported with the offending tensor's name
    a, b = _group()
    spoil(a, b)
    with pytest.raises(exc, match=match):
        vk.pair_sq_distances_grouped(a, b)


def test_grouped_accepts_tensors_that_require_grad():
    # the values are those of detached inputs; the result carries the gradient (test_gradients.py)
    a, b = _group()
    a = [x.requires_grad_() for x in a]
    got = vk.pair_sq_distances_grouped(a, b)
    assert got.requires_grad
    for g, (x, y) in enumerate(zip(a, b, strict=True)):
        want = (x.detach().double() - y.double()).square().sum((1, 2)).float()
        torch.testing.assert_close(got[g].detach(), want, rtol=1e-6, atol=0)


def test_direct_op_call_checks_shapes():
    # the whole message: with a second (static) C++ runtime in the extension it came back cut at the
    # first value printed by torch's operator<< ("got [") and crashed on one GPU image (setup.py)
    with pytest.raises(RuntimeError, match=r"same shape, got \[2, 3\] and \[2, 4\]"):
        torch.ops.vitplast.pair_sq_distances(torch.zeros(2, 3), torch.zeros(2, 4))


def test_extensions_use_the_shared_cxx_runtime():
    import shutil
    import subprocess
    from pathlib import Path

    import vitplast_kernels

    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not found")
    libs = sorted(Path(vitplast_kernels.__file__).parent.glob("_C*.so"))
    assert libs, "no compiled extension next to vitplast_kernels/__init__.py"
    for lib in libs:
        dyn = subprocess.run([readelf, "-d", "-W", str(lib)], capture_output=True, text=True).stdout
        assert "libstdc++.so" in dyn, f"{lib.name} does not link the shared libstdc++ (static C++ runtime?)"
        syms = subprocess.run([readelf, "--dyn-syms", "-W", str(lib)], capture_output=True, text=True).stdout
        own = [ln for ln in syms.splitlines() if ln.rstrip().endswith(" __cxa_throw") and " UND " not in ln]
        assert not own, f"{lib.name} defines its own __cxa_throw: a second C++ runtime beside torch's"


def test_torch_compile_fullgraph_traces_through(gen):
    fx, fy, x, y = (rand((4, 9, 16), torch.float32, gen) for _ in range(4))

    @torch.compile(fullgraph=True, backend="aot_eager")
    def rates(fx, fy, x, y):
        return vk.pair_ratios(fx, fy, x, y, backend="cpu")

    torch.testing.assert_close(rates(fx, fy, x, y), vk.pair_ratios(fx, fy, x, y, backend="cpu"))


def test_graph_only_for_inputs_that_require_grad(gen):
    # measuring detached activations (what capture does) builds no graph; inputs requiring grad do
    x = rand((2, 8), torch.float32, gen).requires_grad_()
    assert vk.pair_sq_distances(x, x.detach() * 2).requires_grad
    assert not vk.pair_sq_distances(x.detach(), x.detach() * 2).requires_grad
    with torch.no_grad():
        assert not vk.pair_sq_distances(x, x * 2).requires_grad


@pytest.mark.parametrize("backend", ["cpu", "torch", "triton"])
def test_calls_without_a_gradient_skip_autograd_and_give_the_same_bits(backend, gen):
    # inputs that need no gradient go below the autograd key (the Python autograd wrapper only
    # redispatches): same values, bit for bit, as through autograd; gradients still flow where asked
    x, y = rand((4, 3, 33), torch.float32, gen), rand((4, 3, 33), torch.float32, gen)
    xg = x.clone().requires_grad_()
    assert not op_paired.without_autograd([xg, y])
    assert op_paired.without_autograd([x, y])
    with torch.no_grad():
        assert op_paired.without_autograd([xg, y])
    through = op_paired.grouped_sq_sums([xg, x], [y, y], backend=backend)
    below = op_paired.grouped_sq_sums([x, x], [y, y], backend=backend)
    assert through.requires_grad and not below.requires_grad
    assert torch.equal(through.detach(), below)
    assert torch.equal(op_paired.pair_sq_sums(x, y, backend=backend), below[0])
    through.sum().backward()
    assert xg.grad is not None and torch.equal(xg.grad, 2 * (x - y))
