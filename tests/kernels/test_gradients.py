"""Differentiable ops: the registered autograd formulas, gradients of every backend against autograd
through the float64 reference, meta tensors, opcheck of every registered op, and a capture that stays
off the autograd graph.

gradcheck needs float64 inputs, which the kernels do not take (float32, float16, bfloat16 only). The
formulas are therefore gradchecked where float64 can reach them: the all-pairs op through its ``torch``
backend (the registered op itself, float64 end to end), and the paired formulas registered, unchanged,
on a float64 test op whose forward is the float64 reference. The kernels' own gradients are then
compared with autograd through the reference, at the kernels' dtypes.
"""

from __future__ import annotations

import pytest
import torch
from helpers import rand

import vitplast_kernels as vk
from vitplast_kernels.ops import paired as op_paired
from vitplast_kernels.ops.all_pairs import ratios_from_sq_matrices

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
BACKENDS = [
    "cpu", "torch", "triton",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="needs CUDA")]),
]
ALL_PAIRS_BACKENDS = ["cpu", "torch", "triton"]
DTYPES = (torch.float32, torch.bfloat16)
GRAD_RTOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}  # norm-wise, gradients returned in the dtype


def _device(backend: str) -> str:
    return DEVICE if backend in ("cuda", "triton") else "cpu"


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_()


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return ((got - want).norm() / want.norm()).item()


# ---------------------------------------------------------------------------------------------
# gradcheck of the formulas in float64

@torch.library.custom_op("vitplast_test::pair_sq64", mutates_args=())
def _pair_sq64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return vk.pair_sq_distances_reference(a, b)


@_pair_sq64.register_fake
def _(a, b):
    return a.new_empty((a.shape[0],), dtype=torch.float64)


@torch.library.custom_op("vitplast_test::grouped_sq64", mutates_args=())
def _grouped_sq64(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([vk.pair_sq_distances_reference(x, y) for x, y in zip(a, b, strict=True)])


@_grouped_sq64.register_fake
def _(a, b):
    return a[0].new_empty((len(a), a[0].shape[0]), dtype=torch.float64)


# the package's formulas, exactly as registered on vitplast::pair_sq_distances[_grouped][_triton]
_pair_sq64.register_autograd(op_paired.pair_sq_backward, setup_context=op_paired.setup_pair_sq)
_grouped_sq64.register_autograd(op_paired.grouped_backward, setup_context=op_paired.setup_grouped)


def test_gradcheck_paired_formula(gen):
    a = _leaf(rand((3, 4, 5), torch.float32, gen).double())
    b = _leaf(rand((3, 4, 5), torch.float32, gen).double())
    assert torch.autograd.gradcheck(_pair_sq64, (a, b))
    assert torch.autograd.gradgradcheck(_pair_sq64, (a, b))


def test_gradcheck_grouped_formula(gen):
    xs = [_leaf(rand(s, torch.float32, gen).double()) for s in ((3, 4), (3, 2, 3))]
    ys = [_leaf(rand(s, torch.float32, gen).double()) for s in ((3, 4), (3, 2, 3))]
    ys[1].requires_grad_(False)  # a member that needs no gradient
    assert torch.autograd.gradcheck(lambda x0, x1, y0, y1: _grouped_sq64([x0, x1], [y0, y1]), (*xs, *ys))


def test_gradcheck_all_pairs_op_and_rates():
    # the registered op, float64 through backend "torch"; distances and rates through sqrt0 / ratios
    a = _leaf(torch.randn(5, 2, 3, dtype=torch.float64))
    op = torch.ops.vitplast.all_pair_sq_distances
    assert torch.autograd.gradcheck(lambda t: op(t, "torch"), (a,))
    assert torch.autograd.gradgradcheck(lambda t: op(t, "torch"), (a,))
    fx = _leaf(torch.randn(5, 4, dtype=torch.float64))
    off = ~torch.eye(5, dtype=torch.bool)
    assert torch.autograd.gradcheck(
        lambda f, x: ratios_from_sq_matrices(op(f, "torch"), op(x, "torch"))[off], (fx, a))
    assert torch.autograd.gradcheck(lambda x: op_paired.sqrt0(op(x, "torch")), (a,))


# ---------------------------------------------------------------------------------------------
# the kernels' gradients against autograd through the float64 reference


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_paired_gradients_match_float64_reference(backend, dtype, gen):
    dev = _device(backend)
    a, b = rand((4, 6, 9), dtype, gen, dev), rand((4, 6, 9), dtype, gen, dev)
    fx, fy = rand((4, 6, 12), dtype, gen, dev), rand((4, 6, 12), dtype, gen, dev)
    w = torch.randn(4, generator=gen, dtype=torch.float64).to(dev)  # upstream weights per pair
    cases = {
        "sq": (lambda a, b, fx, fy: vk.pair_sq_distances(a, b, backend=backend),
               lambda a, b, fx, fy: vk.pair_sq_distances_reference(a, b)),
        "dist": (lambda a, b, fx, fy: vk.pair_distances(a, b, backend=backend),
                 lambda a, b, fx, fy: vk.pair_sq_distances_reference(a, b).sqrt()),
        "ratio": (lambda a, b, fx, fy: vk.pair_ratios(fx, fy, a, b, backend=backend),
                  lambda a, b, fx, fy: vk.pair_ratios_reference(fx, fy, a, b)),
    }
    for name, (ours, ref) in cases.items():
        leaves = [_leaf(t) for t in (a, b, fx, fy)]
        out = ours(*leaves)
        assert out.requires_grad and out.dtype == torch.float32, name
        (out.double() * w).sum().backward()
        leaves64 = [_leaf(t.double()) for t in (a, b, fx, fy)]
        (ref(*leaves64) * w).sum().backward()
        for i, (x, x64) in enumerate(zip(leaves, leaves64, strict=True)):
            if x64.grad is None:  # fx, fy do not enter "sq" and "dist"
                assert x.grad is None, f"{name} input {i}"
                continue
            assert x.grad.dtype == dtype, f"{name} input {i}"
            assert _rel(x.grad, x64.grad) <= GRAD_RTOL[dtype], f"{backend} {dtype} {name} input {i}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_gradients_flow_to_the_members_that_ask(backend, gen):
    dev = _device(backend)
    shapes = [(3, 5, 4), (3, 7), (3, 2, 6)]
    xs = [rand(s, torch.float32, gen, dev) for s in shapes]
    ys = [rand(s, torch.float32, gen, dev) for s in shapes]
    xs[0], ys[2] = _leaf(xs[0]), _leaf(ys[2])
    out = vk.pair_sq_distances_grouped(xs, ys, backend=backend)
    w = torch.randn(out.shape, generator=gen).to(dev)
    (out * w).sum().backward()
    x64, y64 = _leaf(xs[0].double()), _leaf(ys[2].double())
    (vk.pair_sq_distances_reference(x64, ys[0]) * w[0]).sum().backward()
    (vk.pair_sq_distances_reference(xs[2], y64) * w[2]).sum().backward()
    assert _rel(xs[0].grad, x64.grad) <= 1e-5 and _rel(ys[2].grad, y64.grad) <= 1e-5
    assert xs[1].grad is None and ys[1].grad is None


def test_regulariser_through_a_linear_layer(gen):
    # pair_distances(lin(x), lin(y)) as a loss term: the weights receive the float64 reference's gradient
    lin = torch.nn.Linear(8, 8)
    lin64 = torch.nn.Linear(8, 8).double()
    lin64.load_state_dict({k: v.double() for k, v in lin.state_dict().items()})
    x, y = rand((5, 3, 8), torch.float32, gen), rand((5, 3, 8), torch.float32, gen)
    vk.pair_distances(lin(x), lin(y)).sum().backward()
    vk.pair_sq_distances_reference(lin64(x.double()), lin64(y.double())).sqrt().sum().backward()
    assert _rel(lin.weight.grad, lin64.weight.grad) <= 1e-5
    assert _rel(lin.bias.grad, lin64.bias.grad) <= 1e-5 or lin64.bias.grad.abs().max() < 1e-12


@pytest.mark.parametrize("backend", ALL_PAIRS_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_pairs_gradients_match_float64_reference(backend, dtype, gen):
    dev = _device(backend)
    a, fx = rand((6, 3, 5), dtype, gen, dev), rand((6, 7), dtype, gen, dev)
    w = torch.randn(6, 6, generator=gen, dtype=torch.float64).to(dev)  # not symmetric
    off = ~torch.eye(6, dtype=torch.bool, device=dev)
    cases = {
        "sq": (lambda a, fx: vk.all_pair_sq_distances(a, backend=backend),
               lambda a, fx: vk.all_pair_sq_distances_reference(a)),
        "dist": (lambda a, fx: vk.all_pair_distances(a, backend=backend),
                 lambda a, fx: op_paired.sqrt0(vk.all_pair_sq_distances_reference(a))),
        "ratio": (lambda a, fx: vk.all_pair_ratios(fx, a, backend=backend)[off],
                  lambda a, fx: (vk.all_pair_sq_distances_reference(fx)[off]
                                 / vk.all_pair_sq_distances_reference(a)[off]).sqrt()),
    }
    for name, (ours, ref) in cases.items():
        leaves = [_leaf(a), _leaf(fx)]
        weight = w[off] if name == "ratio" else w
        (ours(*leaves).double() * weight).sum().backward()
        leaves64 = [_leaf(a.double()), _leaf(fx.double())]
        (ref(*leaves64) * weight).sum().backward()
        for i, (x, x64) in enumerate(zip(leaves, leaves64, strict=True)):
            if x64.grad is None:
                assert x.grad is None, f"{name} input {i}"
                continue
            assert torch.isfinite(x.grad).all(), f"{backend} {dtype} {name} input {i}: non-finite gradient"
            assert _rel(x.grad, x64.grad) <= GRAD_RTOL[dtype], f"{backend} {dtype} {name} input {i}"


# ---------------------------------------------------------------------------------------------
# meta tensors, opcheck, capture


def test_meta_tensors_are_refused_by_the_public_ops_and_give_shapes_to_the_fakes():
    # a meta tensor holds no data: the public ops refuse it at the call, naming the argument; the
    # registered ops' fake kernels (what tracing runs) still take it and give the shapes
    a = torch.empty(4, 5, 6, device="meta", requires_grad=True)
    b = torch.empty(4, 5, 6, device="meta")
    x = torch.zeros(4, 5, 6)
    for call, name in [(lambda: vk.pair_sq_distances(a, b), "a"), (lambda: vk.pair_distances(x, b), "b"),
                       (lambda: vk.pair_ratios(x, x, a, b), "x"),
                       (lambda: vk.pair_sq_distances_grouped([x, a[:, 1:]], [x, b[:, 1:]]), r"a\[1\]"),
                       (lambda: vk.all_pair_sq_distances(a), "a"), (lambda: vk.all_pair_ratios(x, b), "x")]:
        with pytest.raises(ValueError, match=rf"^{name} is on the meta device"):
            call()
    for op, args, shape in [
        (torch.ops.vitplast.pair_sq_distances, (a, b), (4,)),
        (torch.ops.vitplast.pair_sq_distances_grouped, ([a], [b]), (1, 4)),
        (torch.ops.vitplast.pair_sq_distances_triton, (a, b), (4,)),
        (torch.ops.vitplast.pair_sq_distances_grouped_triton, ([a], [b]), (1, 4)),
        (torch.ops.vitplast.all_pair_sq_distances, (a, "torch"), (4, 4)),
    ]:
        out = op(*args)
        assert out.device.type == "meta" and out.shape == shape and out.dtype == torch.float64, op


def _opcheck_cases():
    """(id, op, args) for every registered op; inputs as the op layer hands them over."""
    g = torch.Generator().manual_seed(7)
    a, b = rand((3, 5, 7), torch.float32, g), rand((3, 5, 7), torch.float32, g)
    h, k = a.to(torch.bfloat16), b.to(torch.bfloat16)
    t, u = a.to(DEVICE), b.to(DEVICE)
    ops = torch.ops.vitplast
    return [
        ("cpp-f32", ops.pair_sq_distances.default, (a, b)),
        ("cpp-bf16-views", ops.pair_sq_distances.default, (h[:, 1:], k[:, :-1])),
        ("cpp-grouped", ops.pair_sq_distances_grouped.default, ([a, a[:, :2]], [b, b[:, 3:]])),
        ("triton", ops.pair_sq_distances_triton.default, (t, u)),
        ("triton-grouped", ops.pair_sq_distances_grouped_triton.default,
         ([t, t[:, :, :3]], [u, u[:, :, 4:]])),
        ("all-cpu", ops.all_pair_sq_distances.default, (a, "cpu")),
        ("all-torch", ops.all_pair_sq_distances.default, (h, "torch")),
        ("all-triton", ops.all_pair_sq_distances.default, (t, "triton")),
    ]


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("case", range(len(_opcheck_cases())),
                         ids=[c[0] for c in _opcheck_cases()])
def test_opcheck_every_registered_op(case, grad):
    _, op, args = _opcheck_cases()[case]

    def prepare(x):
        if isinstance(x, list):
            return [prepare(t) for t in x]
        if isinstance(x, torch.Tensor) and grad:
            return x.detach().clone().requires_grad_()
        return x

    torch.library.opcheck(op, tuple(prepare(x) for x in args))


def _graph_size(t: torch.Tensor) -> int:
    seen, todo = set(), [t.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        todo.extend(f for f, _ in fn.next_functions)
    return len(seen)


def test_capture_stays_off_the_autograd_graph(gen):
    # a training-mode forward under capture: the loss's graph and the gradients are those of the
    # plain forward, and nothing the capture keeps requires grad
    torch.manual_seed(3)
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                                            torch.nn.Linear(16, 8))])
    model.forward = lambda x: model.blocks[0](x)
    x = rand((6, 4, 8), torch.float32, gen)
    plain = model(x).square().sum()
    plain.backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with vk.capture(model, components={"FC1": "blocks.*.0", "FC2": "blocks.*.2"}) as acts:
        loss = model(x).square().sum()
    assert _graph_size(loss) == _graph_size(plain)
    loss.backward()
    for p, g in zip(model.parameters(), want, strict=True):
        assert torch.equal(p.grad, g)
    res = vk.pairwise_plasticity(acts)
    assert res.n_pairs("FC1").item() == 3 and not res.stats.requires_grad
