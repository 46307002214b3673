"""Capture and monitor under torch.compile: no graph break (fullgraph=True), the same numbers as eager,
and monitoring every k steps with at most two compiled variants and no recompile when toggling."""

from __future__ import annotations

import pytest
import torch

import vitplast_kernels as vk

pytestmark = pytest.mark.slow  # see the Makefile's test-fast

timm = pytest.importorskip("timm")

COMPS = ("LN1", "MHA", "LN2", "FC1", "FC2")


class KeepingBackend:
    """A torch.compile backend that runs the traced graph as is and keeps every graph it compiled."""

    def __init__(self) -> None:
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


@pytest.fixture
def model():
    torch.manual_seed(7)
    return timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, pretrained=False).eval()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _images(n, gen):
    return torch.randn(n, 3, 32, 32, generator=gen)


def _assert_same(got: vk.PlasticityResult, want: vk.PlasticityResult, rtol: float) -> None:
    assert got.components == want.components and got.layers == want.layers
    g, w = got.stats.cpu(), want.stats.cpu()
    assert torch.equal(g[..., 0], w[..., 0]), "pairs used differ"
    assert torch.allclose(g, w, rtol=rtol, atol=0), (g - w).abs().max()


CASES = [
    dict(protocol="in_situ", pairs="halves"),
    dict(protocol="in_situ", pairs="all"),
    dict(protocol="decomposition", pairs="halves"),
    dict(protocol="decomposition", pairs="all"),
    dict(protocol="in_situ", pairs="halves", per_head=True, tokens="patches"),
    dict(protocol="decomposition", pairs="halves", per_head=True, tokens="cls"),
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_fullgraph_capture_matches_eager(model, gen, kw):
    x = _images(6, gen)
    with vk.capture(model, **kw) as eager, torch.no_grad():
        model(x)
        model(x.flip(0))
    want = vk.pairwise_plasticity(eager)
    backend = KeepingBackend()
    with vk.capture(model, **kw) as acts, torch.no_grad():
        compiled = torch.compile(model, backend=backend, fullgraph=True)  # raises on any graph break
        compiled(x)
        compiled(x.flip(0))
    got = vk.pairwise_plasticity(acts)
    assert len(backend.graphs) == 1
    _assert_same(got, want, rtol=1e-6)
    if kw.get("per_head"):
        assert torch.allclose(got.head_stats.cpu(), want.head_stats.cpu(), rtol=1e-6, atol=0)


def test_explain_finds_no_graph_break(model, gen):
    x = _images(4, gen)
    with vk.capture(model), torch.no_grad():
        explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


@pytest.mark.slow
def test_inductor_compiled_capture_matches_eager(model, gen):
    x = _images(4, gen)
    with vk.capture(model) as eager, torch.no_grad():
        model(x)
    with vk.capture(model) as acts, torch.no_grad():
        torch.compile(model, fullgraph=True)(x)
    _assert_same(vk.pairwise_plasticity(acts), vk.pairwise_plasticity(eager), rtol=1e-6)


@pytest.mark.slow
def test_monitor_every_k_steps_compiles_two_variants_once(model, gen):
    xs = [_images(4, gen) for _ in range(7)]
    ref = vk.monitor(model, every=3)
    with torch.no_grad():
        for x in xs:
            model(x)
            ref.step()
    ref.detach()
    backend = KeepingBackend()
    mon = vk.monitor(model, every=3)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    with torch.no_grad():
        for i, x in enumerate(xs):
            assert mon.active == (i % 3 == 0)
            compiled(x)
            mon.step()
    mon.detach()
    assert len(backend.graphs) == 2  # monitored and plain, each compiled once; toggling never recompiles
    _assert_same(mon.result(), ref.result(), rtol=1e-6)
    assert mon.capture.n_forwards == 3  # steps 0, 3, 6


def test_plain_variant_holds_none_of_the_capture(model, gen):
    keep = KeepingBackend()
    graphs = keep.graphs
    mon = vk.monitor(model, every=2)
    compiled = torch.compile(model, backend=keep, fullgraph=True)
    with torch.no_grad():
        compiled(_images(4, gen))
        mon.step()
        compiled(_images(4, gen))
    monitored, plain = (len(list(g.graph.nodes)) for g in graphs)
    with torch.no_grad():
        torch._dynamo.reset()
        mon.detach()
        graphs.clear()
        torch.compile(model, backend=keep, fullgraph=True)(_images(4, gen))
    assert plain == len(list(graphs[0].graph.nodes)) < monitored


@pytest.mark.slow
def test_compiled_training_step_with_monitor(model, gen):
    """Forward and backward compiled together with the hooks; gradients are those of the plain step."""
    model.train()
    x, y = _images(4, gen), torch.randint(0, 1000, (4,), generator=gen)

    def step(m):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        return grads

    plain = step(model)
    mon = vk.monitor(model, every=1)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    monitored = step(compiled)
    mon.detach()
    for a, b in zip(plain, monitored, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert mon.result().n_pairs("MHA").sum() == 2 * 2  # 2 layers x 2 pairs


def test_odd_batch_under_compile_is_skipped_and_counted(model, gen):
    mon = vk.monitor(model)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        compiled(_images(4, gen))
        compiled(_images(3, gen))
    with pytest.warns(RuntimeWarning, match="skipped"):
        res = mon.result()
    assert res.meta["skipped_batches"] == 1 and mon.capture.n_forwards == 1


def test_monitor_rejects_bad_every(model):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="every must be a positive integer"):
            vk.monitor(model, every=bad)


@pytest.mark.gpu
def test_monitor_under_cuda_graphs():
    """mode="reduce-overhead": the monitored variant is captured as a CUDA graph too (no host sync, no
    skipped graph), and its numbers are the eager monitor's."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from torch._dynamo.utils import counters

    torch.manual_seed(11)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, pretrained=False).cuda().eval()
    gen = torch.Generator(device="cpu").manual_seed(12)
    xs = [torch.randn(8, 3, 32, 32, generator=gen).cuda() for _ in range(6)]
    ref = vk.monitor(model, every=2)
    with torch.no_grad():
        for x in xs:
            model(x)
            ref.step()
    ref.detach()
    counters.clear()
    mon = vk.monitor(model, every=2)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for x in xs:
            compiled(x)
            mon.step()
    torch.cuda.synchronize()
    mon.detach()
    assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])
    _assert_same(mon.result(), ref.result(), rtol=1e-5)


@pytest.mark.parametrize("choice", ["inductor", "kernel"])
def test_compiled_reduction_either_way_matches_eager(model, gen, monkeypatch, choice):
    """Under compile the paired reduction is plain tensor code for Inductor to fuse, or the custom op."""
    from vitplast_kernels.ops import paired

    monkeypatch.setattr(paired, "COMPILED_REDUCTION", choice)
    x = _images(4, gen)
    with vk.capture(model) as eager, torch.no_grad():
        model(x)
    keep = KeepingBackend()
    graphs = keep.graphs
    with vk.capture(model) as acts, torch.no_grad():
        torch.compile(model, backend=keep, fullgraph=True)(x)
    _assert_same(vk.pairwise_plasticity(acts), vk.pairwise_plasticity(eager), rtol=1e-6)
    ops = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert any("vitplast" in o for o in ops) == (choice == "kernel"), ops
