"""A monitored model measures every forward it runs or raises at the first step it missed, compiled or
not: compiled code without the hooks (another instance compiled first, the model compiled and run before
attaching, a detach and re-attach) is never reused silently. Code compiled while a monitor is attached
guards on hooks (vitplast_kernels.measure.hook_guards); code compiled before is measured in full when
the user set ``skip_nnmodule_hook_guards = False`` first, and raises otherwise. Compiled with
backend="eager": the hooks are a Dynamo matter (guards, cached code), Inductor adds only compile time."""

from __future__ import annotations

import weakref

import pytest
import torch

import vitplast_kernels as vk
from vitplast_kernels.measure import hook_guards
from vitplast_kernels.ops import paired

timm = pytest.importorskip("timm")

SIZES = (8, 12, 8, 8)  # the batch of 12 recompiles: before the fix only that forward was measured


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    # the custom-op sums under compile too: the same kernel as the eager reference, so a fully measured
    # run matches it bit for bit (Inductor's sums, the CPU default under compile, round differently)
    monkeypatch.setattr(paired, "COMPILED_REDUCTION", "kernel")
    # a program of its own: no capture of another test counts as attached (one never detached holds the
    # hook-guard setting until it is collected)
    monkeypatch.setattr(hook_guards, "_attached", weakref.WeakSet())
    monkeypatch.setattr(hook_guards, "_set_by_us", False)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _vit():
    torch.manual_seed(0)  # every instance has the same weights: one eager reference serves all
    return timm.create_model("vit_tiny_patch16_224", img_size=32, depth=1, num_classes=0).eval()


@pytest.fixture(scope="module")
def images():
    gen = torch.Generator().manual_seed(0)
    return {n: torch.randn(n, 3, 32, 32, generator=gen) for n in set(SIZES)}


@pytest.fixture(scope="module")
def reference(images):
    model = _vit()
    with vk.capture(model) as cap, torch.no_grad():
        for n in SIZES:
            model(images[n])
    return cap.result().stats


def _compile(model, fullgraph):
    return torch.compile(model, backend="eager", fullgraph=fullgraph)


def _run(mon, fn, images):
    with torch.no_grad():
        for n in SIZES:
            fn(images[n])
            mon.step()
    return mon.result()


def plain_instance_first(images, fullgraph):
    with torch.no_grad():
        _compile(_vit(), fullgraph)(images[8])
    model = _vit()
    mon = vk.monitor(model, every=1)
    return [_run(mon, _compile(model, fullgraph), images)]


def attach_after_run(images, fullgraph):
    model = _vit()
    compiled = _compile(model, fullgraph)
    with torch.no_grad():
        compiled(images[8])
    return [_run(vk.monitor(model, every=1), compiled, images)]


def detach_then_reattach(images, fullgraph):
    model = _vit()
    compiled = _compile(model, fullgraph)
    first = vk.monitor(model, every=1)
    with torch.no_grad():
        compiled(images[8])
        first.detach()
        compiled(images[8])
    return [_run(vk.monitor(model, every=1), compiled, images)]


def monitored_then_compiled(images, fullgraph):
    """The documented order: attach, then compile (torch's default setting is enough)."""
    model = _vit()
    mon = vk.monitor(model, every=1)
    return [_run(mon, _compile(model, fullgraph), images)]


def two_monitored_models(images, fullgraph):
    a, b = _vit(), _vit()
    mon_a, mon_b = vk.monitor(a, every=1), vk.monitor(b, every=1)
    return [_run(mon_a, _compile(a, fullgraph), images), _run(mon_b, _compile(b, fullgraph), images)]


def compiled_step_function(images, fullgraph):
    """torch.compile(fn) taking the model: the root's hooks are traced too (no eager root hook runs)."""

    @torch.compile(backend="eager", fullgraph=fullgraph)
    def forward(model, x):
        return model(x)

    with torch.no_grad():
        forward(_vit(), images[8])
    model = _vit()
    mon = vk.monitor(model, every=1)
    return [_run(mon, lambda x: forward(model, x), images)]


def compiled_forward_method(images, fullgraph):
    """model.forward compiled: the root's hooks run eagerly around the compiled forward (they count the
    forwards that the component hooks must see)."""
    plain = _vit()
    plain.forward = torch.compile(plain.forward, backend="eager", fullgraph=fullgraph)
    with torch.no_grad():
        plain(images[8])
    model = _vit()
    mon = vk.monitor(model, every=1)
    model.forward = torch.compile(model.forward, backend="eager", fullgraph=fullgraph)
    return [_run(mon, model, images)]


# each case compiles a few times (~5-10 s on 2 cores): plain_instance_first with fullgraph=True runs in
# the fast suite, the rest of the matrix is marked slow
SCENARIOS = [plain_instance_first, attach_after_run, detach_then_reattach, two_monitored_models,
             compiled_step_function, compiled_forward_method]
ATTACHED_FIRST = (monitored_then_compiled, two_monitored_models)  # nothing compiled before attaching


def _matrix(scenarios, fullgraphs):
    return [pytest.param(s, fg, id=f"{s.__name__}-{'fullgraph' if fg else 'default'}",
                         marks=() if (s is plain_instance_first and fg) else pytest.mark.slow)
            for s in scenarios for fg in fullgraphs]


@pytest.mark.slow  # 2-6 s: make test-fast stays under 2 minutes; CI runs it
@pytest.mark.parametrize("scenario, fullgraph", _matrix(SCENARIOS, (True, False)))
def test_every_forward_is_measured_when_the_user_guards_on_hooks(scenario, fullgraph, images, reference):
    """With ``skip_nnmodule_hook_guards = False`` set by the user before anything is compiled, each case
    recompiles with the hooks and measures the 4 forwards (18 pairs), as eager does; the user's setting
    is left as it was."""
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        for res in scenario(images, fullgraph):
            assert res.stats[0, 0, 0].item() == 18
            torch.testing.assert_close(res.stats, reference, rtol=1e-12, atol=0)
        assert torch._dynamo.config.skip_nnmodule_hook_guards is False


@pytest.mark.parametrize("scenario", [pytest.param(monitored_then_compiled),
                                      pytest.param(two_monitored_models, marks=pytest.mark.slow)])
@pytest.mark.slow  # 2-6 s: make test-fast stays under 2 minutes; CI runs it
def test_attached_before_compiling_is_measured_with_torchs_default(scenario, images, reference):
    """Attached before compiling, with torch's own setting: the attach makes the compiled code guard on
    the hooks (the batch of 12 recompiles with them), every forward is measured."""
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=True):
        for res in scenario(images, True):
            assert res.stats[0, 0, 0].item() == 18
            torch.testing.assert_close(res.stats, reference, rtol=1e-12, atol=0)


@pytest.mark.parametrize("scenario, fullgraph",
                         _matrix([s for s in SCENARIOS if s is not two_monitored_models], (True,)))
@pytest.mark.slow  # 2-6 s: make test-fast stays under 2 minutes; CI runs it
def test_hookless_code_raises_at_the_first_missed_step(scenario, fullgraph, images):
    """With torch's default setting, code compiled before the monitor was attached has no hook guards:
    the cached code without hooks runs, and the monitor raises, naming step 0, the cause and the remedy."""
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=True):
        with pytest.raises(vk.MissedForwardError, match=r"step 0: .*_dynamo\.reset\(\) after attaching"):
            scenario(images, fullgraph)


@pytest.mark.slow
def test_two_monitored_models_need_no_guard(images, reference):
    """Two monitored instances share hooked code: measured in full without the hook guards, no false alarm."""
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=True):
        for res in two_monitored_models(images, True):
            torch.testing.assert_close(res.stats, reference, rtol=1e-12, atol=0)


@pytest.mark.slow  # 2-6 s: make test-fast stays under 2 minutes; CI runs it
def test_a_step_without_forward_is_not_a_miss_in_eager_or_when_paused(images):
    """An eager model that did not run in a step missed nothing; a compiled one may skip a due step
    inside measuring(False)."""
    model = _vit()
    with vk.monitor(model, every=1) as mon, torch.no_grad():
        model(images[8])
        mon.step()
        mon.step()  # no forward in this step
        assert mon.result().stats[0, 0, 0].item() == 4
    model = _vit()
    mon = vk.monitor(model, every=1)
    compiled = _compile(model, True)
    with torch.no_grad():
        compiled(images[8])
        mon.step()
        with mon.measuring(False):
            compiled(images[8])  # a due step paused on purpose
        mon.step()
        compiled(images[8])
        mon.step()
    assert mon.result().stats[0, 0, 0].item() == 8


@pytest.mark.parametrize("monitored", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["monitor", "capture"])
def test_strict_under_fullgraph_raises_the_package_error_outside_the_graph(images, monitored):
    """strict=True and an odd batch under torch.compile(fullgraph=True): the package's ValueError, not
    Dynamo's "Observed exception" (raised at step() or result(), after the compiled forward)."""
    model = _vit()
    odd = images[8][:5]
    cap = vk.monitor(model, every=1, strict=True) if monitored else vk.capture(model, strict=True).attach()
    compiled = _compile(model, True)
    with torch.no_grad():
        compiled(images[8])
        compiled(odd)
    with pytest.raises(ValueError, match=r"pairs='halves' needs an even batch .* got 5 sequences"):
        cap.step() if monitored else cap.result()
    with torch.no_grad():
        compiled(images[8])  # the error was raised once; measuring goes on
    res = cap.result()
    assert res.stats[0, 0, 0].item() == 8 and res.meta["skipped_batches"] == 1
