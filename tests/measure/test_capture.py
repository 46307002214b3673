"""capture(...) + pairwise_plasticity on real and hand-written transformers, against float64 truths.

The references below never use the package: their own forward hooks store the activations in
float64 (in_situ), or they call block submodules on the embedding output (decomposition), and
compute ``||f(x) - f(y)|| / ||x - y||`` per pair, pair ``i`` = ``(i, i + B)``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vitplast_kernels as vk
from vitplast_kernels.ops import paired

timm = pytest.importorskip("timm")

COMPS = ("LN1", "MHA", "LN2", "FC1", "FC2")
RTOL = 2e-5  # float32 sums of float32 activations vs float64 sums of the same activations


@pytest.fixture(scope="module")
def vit():
    """The full 12-block vit_tiny (random init, fixed seed) for the float64 comparisons."""
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", img_size=32, pretrained=False).eval()


@pytest.fixture(scope="module")
def small():
    """vit_tiny cut to 3 blocks: the same code paths, a quarter of the time (2-core CI)."""
    torch.manual_seed(5)
    return timm.create_model("vit_tiny_patch16_224", img_size=32, depth=3, pretrained=False).eval()


def _images(n, gen):
    return torch.randn(n, 3, 32, 32, generator=gen)


def _rates64(x: torch.Tensor, y: torch.Tensor, sl=None) -> torch.Tensor:
    """(2B, ...) input and output -> (B,) float64 rates of pairs (i, i + B)."""
    x, y = x.double(), y.double()
    if sl is not None:
        x, y = x[:, sl], y[:, sl]
    b = x.shape[0] // 2
    num = (y[:b] - y[b:]).pow(2).flatten(1).sum(1)
    den = (x[:b] - x[b:]).pow(2).flatten(1).sum(1)
    return (num / den).sqrt()


def _timm_modules(model):
    return {
        "LN1": [b.norm1 for b in model.blocks], "MHA": [b.attn for b in model.blocks],
        "LN2": [b.norm2 for b in model.blocks], "FC1": [b.mlp.fc1 for b in model.blocks],
        "FC2": [b.mlp.fc2 for b in model.blocks],
    }


def _in_situ_reference(model, mods, images, sl=None):
    """{component: (L, B) float64 rates} from the real forward, with our own hooks."""
    store: dict = {}
    handles = []
    for c, layer_mods in mods.items():
        for l, m in enumerate(layer_mods):
            def hook(mod, args, out, c=c, l=l):
                out = out[0] if isinstance(out, tuple) else out
                store[(c, l)] = (args[0].detach().double().clone(), out.detach().double().clone())
            handles.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(images)
    finally:
        for h in handles:
            h.remove()
    return {c: torch.stack([_rates64(*store[(c, l)], sl=sl) for l in range(len(ms))])
            for c, ms in mods.items()}


def _timm_embedding(model, images):
    with torch.no_grad():
        x = model.patch_embed(images)
        x = model._pos_embed(x)
        x = model.patch_drop(x)
        return model.norm_pre(x)


def _decomposition_reference(blocks_fns, e, sl=None):
    """blocks_fns: {component: [callable per layer]}; FC2 gets e zero-padded (callable's job)."""
    out = {}
    with torch.no_grad():
        for c, fns in blocks_fns.items():
            out[c] = torch.stack([_rates64(e, fn(e), sl=sl) for fn in fns])
    return out


def _check(res, ref, rtol=RTOL):
    """Result vs (L, B) float64 rates; pairs with identical inputs (NaN rates) are excluded."""
    assert res.components == tuple(ref)
    for c, rates in ref.items():
        valid = torch.isfinite(rates)
        n = valid.sum(1)
        r0 = torch.where(valid, rates, 0)
        mean = r0.sum(1) / n
        std = ((torch.where(valid, rates - mean[:, None], 0) ** 2).sum(1) / (n - 1)).sqrt()
        std = torch.where(n > 1, std, float("nan"))
        got = res.mean(c)
        assert got.shape == (rates.shape[0],), c
        assert torch.allclose(got, mean, rtol=rtol, atol=0, equal_nan=True), (c, got, mean)
        assert torch.allclose(res.std(c), std, rtol=1e-3, atol=1e-7, equal_nan=True), c
        assert torch.equal(res.n_pairs(c), n) and torch.equal(res.n_identical(c), (~valid).sum(1))
        ci = res.ci(c)
        half = 1.959963984540054 * std / n.sqrt()
        assert torch.allclose(ci[:, 1] - ci[:, 0], 2 * half, rtol=1e-3, atol=1e-7, equal_nan=True)


@pytest.mark.slow
def test_in_situ_matches_float64_reference(vit, gen):
    x = _images(6, gen)
    with vk.capture(vit, protocol="in_situ", pairs="halves") as acts:
        with torch.no_grad():
            vit(x)
    res = vk.pairwise_plasticity(acts)
    assert res.components == COMPS and res.n_layers == 12 and acts.preset == "timm-vit"
    _check(res, _in_situ_reference(vit, _timm_modules(vit), x))


def test_in_situ_reduces_each_distinct_tensor_once(small, gen):
    x = _images(4, gen)
    acts = vk.capture(small)
    seen = []
    orig = acts.pairing.sq_sums

    def counting(tensors, **kw):
        seen.extend(tuple(t.shape) for t in tensors)
        return orig(tensors, **kw)

    acts.pairing.sq_sums = counting
    with acts, torch.no_grad():
        small(x)
    # per pre-norm block: block input, LN1 out (= MHA in), MHA out, LN2 in, LN2 out (= FC1 in),
    # FC1 out, FC2 in, FC2 out -> 8 tensors, not 10
    assert len(seen) == 8 * 3


@pytest.mark.slow
def test_decomposition_matches_float64_reference(vit, gen):
    x = _images(6, gen)
    with vk.capture(vit, protocol="decomposition") as acts:
        with torch.no_grad():
            vit(x)
    res = vk.pairwise_plasticity(acts)
    e = _timm_embedding(vit, x)
    d = e.shape[-1]

    def fc2(b):
        return lambda t: b.mlp.fc2(torch.cat([t, t.new_zeros(*t.shape[:-1], b.mlp.fc2.in_features - d)], -1))

    fns = {
        "LN1": [b.norm1 for b in vit.blocks], "MHA": [b.attn for b in vit.blocks],
        "LN2": [b.norm2 for b in vit.blocks], "FC1": [b.mlp.fc1 for b in vit.blocks],
        "FC2": [fc2(b) for b in vit.blocks],
    }
    ref = _decomposition_reference(fns, e)
    _check(res, ref)
    # every LN of the decomposition sees the same e; LN1 == LN2 only when their params agree (init)
    assert torch.allclose(res.mean("LN1"), res.mean("LN2"))


class _Block(nn.Module):
    """A pre-norm block whose modules are named unlike timm's."""

    def __init__(self, d, h):
        super().__init__()
        self.attn_norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn = nn.Sequential()
        self.ffn.add_module("fc1", nn.Linear(d, 3 * d))
        self.ffn.add_module("act", nn.GELU())
        self.ffn.add_module("fc2", nn.Linear(3 * d, d))

    def forward(self, x):
        h = self.attn_norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ffn(self.ffn_norm(x))


class _Net(nn.Module):
    def __init__(self, d=24, h=4, depth=3, vocab=50):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_Block(d, h) for _ in range(depth))
        self.head = nn.Linear(d, 2)

    def forward(self, ids):
        x = self.embedding(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(1))


MAPPING = {"LN1": "blocks.*.attn_norm", "MHA": "blocks.*.attn", "LN2": "blocks.*.ffn_norm",
           "FC1": "blocks.*.ffn.fc1", "FC2": "blocks.*.ffn.fc2"}


def test_custom_mapping_hand_written_transformer(gen):
    torch.manual_seed(1)
    net = _Net().eval()
    ids = torch.randint(0, 50, (8, 7), generator=gen)
    with pytest.raises(ValueError, match="no component found"):
        vk.capture(net)
    with vk.capture(net, components=MAPPING) as acts, torch.no_grad():
        net(ids)
    res = vk.pairwise_plasticity(acts)
    mods = {"LN1": [b.attn_norm for b in net.blocks], "MHA": [b.attn for b in net.blocks],
            "LN2": [b.ffn_norm for b in net.blocks], "FC1": [b.ffn.fc1 for b in net.blocks],
            "FC2": [b.ffn.fc2 for b in net.blocks]}
    _check(res, _in_situ_reference(net, mods, ids))

    with vk.capture(net, components=MAPPING, embedding="embedding", protocol="decomposition") as acts:
        with torch.no_grad():
            net(ids)
    res = vk.pairwise_plasticity(acts)
    e = net.embedding(ids).detach()
    fns = {"LN1": [b.attn_norm for b in net.blocks],
           "MHA": [(lambda t, b=b: b.attn(t, t, t, need_weights=False)[0]) for b in net.blocks],
           "LN2": [b.ffn_norm for b in net.blocks], "FC1": [b.ffn.fc1 for b in net.blocks],
           "FC2": [(lambda t, b=b: b.ffn.fc2(torch.cat([t, 0 * t, 0 * t], -1))) for b in net.blocks]}
    _check(res, _decomposition_reference(fns, e))
    # per-head rates of nn.MultiheadAttention: tests/measure/test_per_head_torch_mha.py


def test_matched_pairs_are_halves_of_cat(small, gen):
    """X[i] paired with Y[i] (two datasets) == halves of torch.cat([X, Y]), vs separate forwards."""
    X, Y = _images(3, gen), _images(3, gen) * 0.5 + 1
    with vk.capture(small) as acts, torch.no_grad():
        small(torch.cat([X, Y]))
    res = vk.pairwise_plasticity(acts)
    fx, fy = {}, {}
    for store, inp in ((fx, X), (fy, Y)):
        h = small.blocks[2].mlp.fc1.register_forward_hook(lambda m, a, o, s=store: s.update(i=a[0], o=o))
        with torch.no_grad():
            small(inp)
        h.remove()
    num = (fx["o"].double() - fy["o"].double()).pow(2).flatten(1).sum(1)
    den = (fx["i"].double() - fy["i"].double()).pow(2).flatten(1).sum(1)
    assert torch.allclose(res.mean("FC1")[2], (num / den).sqrt().mean(), rtol=1e-5)


def test_accumulation_over_batches(small, gen):
    a, b = _images(4, gen), _images(6, gen)
    with vk.capture(small) as acts, torch.no_grad():
        small(a)
        small(b)
    res = vk.pairwise_plasticity(acts)
    assert acts.n_forwards == 2
    assert (res.n_pairs("MHA") == 5).all()
    ra = _in_situ_reference(small, _timm_modules(small), a)
    rb = _in_situ_reference(small, _timm_modules(small), b)
    for c in COMPS:
        both = torch.cat([ra[c], rb[c]], 1)
        assert torch.allclose(res.mean(c), both.mean(1), rtol=RTOL), c
        assert torch.allclose(res.std(c), both.std(1), rtol=1e-3), c


def test_identical_and_nonfinite_pairs(small, gen):
    x = _images(6, gen)
    x[3] = x[0]  # pair 0 identical
    with vk.capture(small) as acts, torch.no_grad():
        small(x)
    res = vk.pairwise_plasticity(acts, strict=True)
    for c in COMPS:
        assert (res.n_identical(c) == 1).all() and (res.n_pairs(c) == 2).all(), c
        assert (res.n_nonfinite(c) == 0).all()
    x[1, 0, 0, 0] = float("nan")  # pair 1 becomes non-finite everywhere downstream
    with vk.capture(small) as acts, torch.no_grad():
        small(x)
    res = vk.pairwise_plasticity(acts)
    assert (res.n_nonfinite("FC2") == 1).all() and (res.n_pairs("FC2") == 1).all()
    assert torch.isfinite(res.mean("FC2")).all()
    with pytest.raises(ValueError, match=r"LN1 layer 0: 1 pair"):
        vk.pairwise_plasticity(acts, strict=True)


@pytest.mark.slow
def test_training_gradients_unchanged(gen):
    """Train mode with dropout: same loss and bitwise the same gradients with and without capture."""
    torch.manual_seed(2)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=3, pretrained=False,
                              drop_rate=0.1, proj_drop_rate=0.1, attn_drop_rate=0.1).train()
    x, target = _images(4, gen), torch.randint(0, 1000, (4,), generator=gen)

    def grads(protocol):
        torch.manual_seed(7)  # the same dropout masks for every run
        model.zero_grad(set_to_none=True)
        if protocol is None:
            loss = nn.functional.cross_entropy(model(x), target)
            loss.backward()
        else:
            with vk.capture(model, protocol=protocol) as acts:
                loss = nn.functional.cross_entropy(model(x), target)
                loss.backward()
            res = vk.pairwise_plasticity(acts)
            assert not res.stats.requires_grad and torch.isfinite(res.mean("MHA")).all()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    l0, g0 = grads(None)
    for protocol in ("in_situ", "decomposition"):
        l1, g1 = grads(protocol)
        assert torch.equal(l0, l1)
        assert all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True)), protocol


def _n_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_removed_on_exit_and_on_exception(small, gen):
    before = _n_hooks(small)
    with vk.capture(small, per_head=True) as acts:
        assert _n_hooks(small) > before
        with torch.no_grad():
            small(_images(2, gen))
    assert _n_hooks(small) == before
    with pytest.raises(ValueError, match="even batch"):
        with vk.capture(small, protocol="decomposition", strict=True), torch.no_grad():
            small(_images(3, gen))  # odd batch, strict: raised from inside the forward
    assert _n_hooks(small) == before
    assert not acts.attached and acts._fwd.e is None and not acts._fwd.slots and not acts._fwd.rows


@pytest.mark.parametrize("protocol", ["in_situ", "decomposition"])
def test_a_batch_that_does_not_fit_is_skipped_counted_and_warned_once(small, gen, protocol):
    x = _images(4, gen)
    with vk.capture(small, protocol=protocol) as ref, torch.no_grad():
        small(x)
    with pytest.warns(RuntimeWarning, match="does not fit pairs='halves' was skipped") as record:
        with vk.capture(small, protocol=protocol) as acts, torch.no_grad():
            small(x)
            small(_images(3, gen))  # an odd last batch: skipped, the forward itself runs
            small(_images(5, gen))
    assert len([w for w in record if "skipped" in str(w.message)]) == 1
    res = vk.pairwise_plasticity(acts)
    assert res.meta["skipped_batches"] == 2 and acts.n_forwards == 1
    assert torch.equal(res.stats, vk.pairwise_plasticity(ref).stats)


def test_errors(small, gen):
    for n in (1, 5):
        with pytest.raises(ValueError, match=f"pairs='halves' needs an even batch.*got {n} sequences"):
            with vk.capture(small, strict=True), torch.no_grad():
                small(_images(n, gen))
    with pytest.raises(ValueError, match="no component found"):
        vk.capture(nn.Sequential(nn.Linear(3, 3)))
    with pytest.raises(ValueError, match=r"components\['FC2'\] pattern 'blocks.\*.ffn' matches no module"):
        vk.capture(small, components={"FC2": "blocks.*.ffn"})
    with pytest.raises(ValueError, match="protocol must be"):
        vk.capture(small, protocol="paper")
    with pytest.raises(ValueError, match="pairs='all' needs a batch of at least 2 sequences"):
        with vk.capture(small, pairs="all", strict=True), torch.no_grad():
            small(_images(1, gen))
    with pytest.raises(RuntimeError, match="no forward pass"):
        with vk.capture(small) as acts:
            pass
        vk.pairwise_plasticity(acts)
    with pytest.raises(ValueError, match="needs embedding="):
        vk.capture(small, components={"MHA": "blocks.*.attn"}, protocol="decomposition")
    with vk.capture(small) as acts, torch.no_grad():
        small(_images(4, gen))
    with pytest.raises(ValueError, match="chosen when the capture is made"):
        vk.pairwise_plasticity(acts, pairs="all")  # would otherwise be silently ignored


def test_per_head(small, gen):
    x = _images(6, gen)
    with vk.capture(small, per_head=True) as acts, torch.no_grad():
        small(x)
    res = vk.pairwise_plasticity(acts)
    heads = small.blocks[0].attn.num_heads
    store = {}
    hs = [b.attn.proj.register_forward_pre_hook(lambda m, a, l=l: store.update({("o", l): a[0]}))
          for l, b in enumerate(small.blocks)]
    hs += [b.attn.register_forward_pre_hook(lambda m, a, l=l: store.update({("i", l): a[0]}))
           for l, b in enumerate(small.blocks)]
    with torch.no_grad():
        small(x)
    for h in hs:
        h.remove()
    got = res.head_mean()
    assert got.shape == (3, heads)
    for l in range(3):
        o, i = store[("o", l)].double(), store[("i", l)].double()
        dh = o.shape[-1] // heads
        for h in range(heads):
            num = (o[:3, :, h * dh:(h + 1) * dh] - o[3:, :, h * dh:(h + 1) * dh]).pow(2).sum((1, 2))
            den = (i[:3] - i[3:]).pow(2).sum((1, 2))
            assert torch.allclose(got[l, h], (num / den).sqrt().mean(), rtol=RTOL), (l, h)
    # decomposition: the heads of attn(e), e = the tokens entering blocks[0]
    with vk.capture(small, per_head=True, protocol="decomposition") as acts, torch.no_grad():
        small(x)
    got = vk.pairwise_plasticity(acts).head_mean()
    e = _timm_embedding(small, x).double()
    den = (e[:3] - e[3:]).pow(2).sum((1, 2))
    for l, b in enumerate(small.blocks):
        h = b.attn.proj.register_forward_pre_hook(lambda m, a: store.update(o=a[0].double()))
        with torch.no_grad():
            b.attn(e.float())
        h.remove()
        o = store["o"].unflatten(-1, (heads, -1))
        num = (o[:3] - o[3:]).pow(2).sum((1, 3))  # (pairs, heads)
        assert torch.allclose(got[l], (num / den[:, None]).sqrt().mean(0), rtol=RTOL), l


@pytest.mark.parametrize("tokens,sl", [("cls", slice(0, 1)), ("patches", slice(1, None))])
def test_token_subsets(small, gen, tokens, sl):
    x = _images(4, gen)
    with vk.capture(small, tokens=tokens) as acts, torch.no_grad():
        small(x)
    res = vk.pairwise_plasticity(acts)
    _check(res, _in_situ_reference(small, _timm_modules(small), x, sl=sl))
    with vk.capture(small, tokens=tokens, protocol="decomposition") as acts, torch.no_grad():
        small(x)
    res = vk.pairwise_plasticity(acts)
    e = _timm_embedding(small, x)

    def fc2(b):
        return lambda t: b.mlp.fc2(torch.cat([t, t.new_zeros(*t.shape[:-1], 3 * t.shape[-1])], -1))

    fns = {"LN1": [b.norm1 for b in small.blocks], "MHA": [b.attn for b in small.blocks],
           "LN2": [b.norm2 for b in small.blocks], "FC1": [b.mlp.fc1 for b in small.blocks],
           "FC2": [fc2(b) for b in small.blocks]}
    _check(res, _decomposition_reference(fns, e, sl=sl))


def test_no_grad_inference_mode_autocast(small, gen):
    x = _images(4, gen)
    out = {}
    for name, ctx in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode),
                      ("bf16", lambda: torch.autocast("cpu", dtype=torch.bfloat16))):
        with vk.capture(small) as acts, ctx():
            small(x)
            small(x)
        out[name] = vk.pairwise_plasticity(acts)
    for c in COMPS:
        assert torch.equal(out["no_grad"].mean(c), out["inference_mode"].mean(c))
        # bf16 activations: the rates move by the bf16 rounding of the activations
        assert torch.allclose(out["bf16"].mean(c), out["no_grad"].mean(c), rtol=0.1), c


@pytest.mark.slow  # 2-6 s: make test-fast stays under 2 minutes; CI runs it
def test_a_model_compiled_and_run_before_the_capture_is_measured_or_raises(gen, monkeypatch):
    """Hooks added after a compiled model ran: with ``skip_nnmodule_hook_guards = False`` set first, the
    cached code guards on hooks, so the model recompiles and is measured; with torch's default, the
    cached code without hooks runs and result() says so and how to fix it, instead of returning less."""
    monkeypatch.setattr(paired, "COMPILED_REDUCTION", "kernel")  # the eager kernel's sums: bit-equal
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=1, pretrained=False).eval()
    x = _images(4, gen)
    with vk.capture(model) as ref, torch.no_grad():
        model(x)
    for guard in (True, False):
        compiled = torch.compile(model, backend="eager")
        torch._dynamo.reset()
        try:
            with torch._dynamo.config.patch(skip_nnmodule_hook_guards=not guard):
                with torch.no_grad():
                    compiled(x)
                with vk.capture(compiled) as late, torch.no_grad():
                    compiled(x)
                if guard:
                    assert torch.equal(vk.pairwise_plasticity(late).stats, ref.result().stats)
                else:
                    with pytest.raises(RuntimeError, match="attach the capture .* before compiling"):
                        vk.pairwise_plasticity(late)
        finally:
            torch._dynamo.reset()


def test_swiglu_eva_with_rope(gen):
    """Eva (DINOv3-style) blocks: rotary embeddings passed as kwargs, SwiGLU FC1 = fc1_g and fc1_x."""
    from timm.models.eva import Eva

    torch.manual_seed(4)
    model = Eva(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, swiglu_mlp=True,
                scale_mlp=True, use_rot_pos_emb=True, ref_feat_shape=(4, 4), num_classes=3).eval()
    x = _images(4, gen)
    for protocol in ("in_situ", "decomposition"):
        with vk.capture(model, protocol=protocol) as acts, torch.no_grad():
            model(x)
        res = vk.pairwise_plasticity(acts)
        assert acts.preset == "timm-swiglu" and res.components == COMPS
        assert all(torch.isfinite(res.mean(c)).all() for c in COMPS)
    # FC1 in situ = the stacked map [fc1_g; fc1_x]
    store = {}
    hs = [model.blocks[1].mlp.fc1_g.register_forward_hook(lambda m, a, o: store.update(i=a[0], g=o)),
          model.blocks[1].mlp.fc1_x.register_forward_hook(lambda m, a, o: store.update(x=o))]
    with vk.capture(model) as acts, torch.no_grad():
        model(x)
    for h in hs:
        h.remove()
    res = vk.pairwise_plasticity(acts)
    ref = _rates64(store["i"], torch.cat([store["g"], store["x"]], -1)).mean()
    assert torch.allclose(res.mean("FC1")[1], ref, rtol=RTOL)


def test_module_called_twice_per_forward(gen):
    """A shared module contributes the pairs of each call (two rows of one forward, same layer)."""
    torch.manual_seed(6)
    lin = nn.Linear(6, 6)

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return self.lin(torch.tanh(self.lin(x)))

    model = Twice()
    x = torch.randn(8, 3, 6, generator=gen)
    with vk.capture(model, components={"FC": "lin"}) as acts, torch.no_grad():
        model(x)
    res = vk.pairwise_plasticity(acts)
    with torch.no_grad():
        h = lin(x)
        ref = torch.cat([_rates64(x, h), _rates64(torch.tanh(h), lin(torch.tanh(h)))])
    assert res.n_pairs("FC").tolist() == [8]
    assert torch.allclose(res.mean("FC"), ref.mean().unsqueeze(0), rtol=RTOL)


def test_prefix_tokens_errors(small, gen):
    with pytest.raises(ValueError, match="prefix_tokens must be >= 0, got -1"):
        vk.capture(small, tokens="patches", prefix_tokens=-1)
    with vk.capture(small, tokens="patches", prefix_tokens=1000), torch.no_grad():
        with pytest.raises(ValueError, match="no token of .* is left after the 1000 prefix tokens"):
            small(_images(4, gen))
