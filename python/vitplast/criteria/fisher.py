"""``fisher``: the empirical Fisher information of a unit's parameters, per parameter."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.func import functional_call, vjp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from .base import Cost, Setting, Units, unit_grid
from .loss import LossCriterion, cross_entropy_backwards, gradients_only_for

# per-sample gradient values of one layer held at once (2**25 float32 values = 128 MiB): a linear
# layer's per-sample weight gradients are made for this many values' worth of samples at a time
MAX_VALUES = 2**25
# samples per vmap call of the general path (modules other than Linear and LayerNorm)
CHUNK = 16


class Fisher(LossCriterion):
    """The empirical Fisher information per parameter of the unit:

    ``F(u) = (1 / |u|) · (1 / n) Σ_i Σ_{θ ∈ u} (∂ℓ_i / ∂θ)²``, ``ℓ_i`` the cross-entropy of sample ``i``
    of the criterion's batches (labelled downstream images), ``|u|`` the unit's parameter count (so the
    score does not just follow size); the sum over parameters (``F(u) · |u|``) is reported beside it as
    the extra value ``sum``. At the pretrained weights, the head initialised as the finetuning run of
    the seed initialises it, eval mode; per seed, the score the mean over seeds. (Kirkpatrick et al.,
    *Overcoming catastrophic forgetting in neural networks*, PNAS 2017, for the empirical Fisher as a
    parameter importance.)

    **One forward and one backward per batch.** The loss is the sum of the samples' cross-entropies;
    in eval mode no sample's output depends on another's, so the gradient a module's output receives
    in sample ``i``'s rows is ``∂ℓ_i / ∂out_i``. Forward hooks keep each unit module's input ``a``
    and put a hook on its output that receives that gradient ``g`` during the backward (only the input
    images require a gradient: no parameter's summed gradient is computed), and the squared per-sample
    gradients are made there, one module at a time, from ``a`` and ``g`` (a module called more than
    once per forward: its calls' tokens are joined before squaring, since its per-sample gradient is
    the sum over calls):

    - ``nn.Linear`` on ``(N, T, in)`` tokens: ``∂ℓ_i/∂W = Σ_t g_it a_itᵀ`` (a batched matrix product
      per sample, float32, as autograd makes it; `MAX_VALUES` values at a time), ``∂ℓ_i/∂b = Σ_t g_it``;
    - ``nn.LayerNorm``: ``∂ℓ_i/∂γ = Σ_t g_it ⊙ x̂_it`` (``x̂`` the normalised input, remade from the
      kept input), ``∂ℓ_i/∂β = Σ_t g_it``;
    - any other module holding a unit's parameters (a LayerScale, attention with its own bias
      parameters, an RMSNorm): ``torch.func.vmap`` over samples of the ``vjp`` of that module alone at
      its kept inputs, with ``g`` as the cotangent (`CHUNK` samples per call), after the backward.

    Each squared per-sample gradient is summed over its values (float32, cascaded), over the unit's
    parameters and over the samples (float64), so at most one layer's per-sample gradients of
    `MAX_VALUES` values exist at once, never the ``(N, P)`` gradient of the model; the memory is a
    training step's activations (kept for the backward as training keeps them) without the parameters'
    gradients and optimiser state. The forward runs the math attention, as the former definition did
    (``vmap`` has no batching rule for the fused kernel): the same arithmetic keeps the values within
    float32 noise of it (on the digits ViT a relative 4.9e-7 at most, 9.2e-7 with the fused kernel, and
    closer to float64 too), at the cost of the attention matrices kept for the backward. The values are
    those of a ``vmap`` over per-sample ``grad``\\ s of the whole model (this criterion's former
    definition, kept as the reference of ``tests/vitplast/criteria/test_fisher_one_pass.py``: max
    relative difference at most 1e-6 on the digits ViT and a random-init ViT-Ti), which ran a per-sample
    forward and backward per group of units and so grew with the model (36 groups on ViT-B/16).

    Why hooks of our own rather than a library (each installable from PyPI here): Opacus 1.6's
    ``GradSampleModule`` stores every parameter's per-sample gradient (``grad_sample``, ``(N, *shape)``) for
    the whole model at once, the ``(N, P)`` tensor this avoids; its ghost-clipping module gives per-sample
    norms without it, but as float32 Gram products (``Σ_ts (g_t·g_s)(a_t·a_s)``, whose terms cancel: no bound
    on the relative error), it computes every parameter's summed gradient as well, and it is built for a
    differentially private training step (its loss wrapper and second backward). BackPACK 1.7's
    ``SumGradSquared`` has no LayerNorm extension (the LN1/LN2 units) and needs the model ``extend``\\ ed
    module by module. nngeometry 0.4's diagonal Fisher is the Fisher of the model's predictive distribution
    (closed form over classes), not the empirical Fisher at the labels, and its linear layer takes one token
    per sample (``(gy²)ᵀ x²`` is not a sum over tokens of outer products).

    Passes counted per batch: one forward and one backward.
    """

    name = "fisher"

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        unit_params = {u: units.parameters(net, u) for u in units.modules}
        squares = _PerSampleSquares(net, {n for ps in unit_params.values() for n in ps})
        with gradients_only_for(net, set()), squares, sdpa_kernel([SDPBackend.MATH]):
            cross_entropy_backwards(net, setting, cost, self.name, input_grad=True, after=squares.flush)
        n = sum(int(b.labels.shape[0]) for b in setting.batches)
        sums = {u: sum(squares.total[name] for name in ps) / n for u, ps in unit_params.items()}
        sizes = {u: sum(p.numel() for p in ps.values()) for u, ps in unit_params.items()}
        return (unit_grid(units, {u: s / sizes[u] if sizes[u] else math.nan for u, s in sums.items()}),
                {"sum": unit_grid(units, sums)})


def _is_linear(m: nn.Module) -> bool:
    return isinstance(m, nn.Linear) and type(m).forward is nn.Linear.forward


def _is_layer_norm(m: nn.Module) -> bool:
    # timm's LayerNorm: F.layer_norm (or its fused equivalent) of the same arguments
    return isinstance(m, nn.LayerNorm) and (type(m).forward is nn.LayerNorm.forward or (
        type(m).__name__ == "LayerNorm" and type(m).__module__.startswith("timm.")))


def _closed_form(m: nn.Module) -> bool:
    return _is_linear(m) or _is_layer_norm(m)


class _PerSampleSquares:
    """Hooks on the modules holding ``names`` (parameter names of ``net``): ``total[name]``, the sum over
    samples of the squared per-sample gradient of each parameter, summed over its values,
    grown by each forward and backward made inside (`flush` after each backward)."""

    def __init__(self, net: nn.Module, names: set[str]) -> None:
        modules = dict(net.named_modules())
        self.total = {name: 0.0 for name in names}
        self.wanted: dict[str, dict[str, str]] = {}  # module name -> {local name: parameter name}
        for name in sorted(names):
            owner, _, local = name.rpartition(".")
            self.wanted.setdefault(owner, {})[local] = name
        self.modules = {m: modules[m] for m in self.wanted}
        self.calls: dict[str, list] = {m: [] for m in self.wanted}  # per call: [args, kwargs, grad]
        self.recording = False
        self.handles: list = []

    def __enter__(self):
        for name, m in self.modules.items():
            self.handles.append(m.register_forward_hook(self._forward_hook(name), with_kwargs=True))
        self.recording = True
        return self

    def __exit__(self, *exc) -> None:
        self.recording = False
        for h in self.handles:
            h.remove()
        self.handles.clear()
        for calls in self.calls.values():
            calls.clear()

    def _forward_hook(self, name: str):
        def hook(module, args, kwargs, out):
            if not self.recording or not torch.is_grad_enabled():
                return
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"fisher: module {name!r} ({type(module).__name__}) returns "
                                f"{type(out).__name__}, not a tensor: its per-sample gradients are not made")
            if not out.requires_grad:
                return  # its parameters' gradients are zero
            call = [tuple(_detached(a) for a in args), {k: _detached(v) for k, v in kwargs.items()}, None]
            self.calls[name].append(call)
            out.register_hook(self._grad_hook(name, call))
        return hook

    def _grad_hook(self, name: str, call: list):
        def hook(grad):
            call[2] = grad.detach()
            if _closed_form(self.modules[name]) and all(c[2] is not None for c in self.calls[name]):
                self._square(name)  # every call's gradient is in: made now, its inputs freed
        return hook

    def flush(self) -> None:
        """After a backward: the modules not made during it (other modules; calls whose output got no
        gradient count zero)."""
        self.recording = False
        try:
            # the math attention: vmap has batching rules for its ops, not for the fused CPU kernel's
            with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
                for name, calls in self.calls.items():
                    calls[:] = [c for c in calls if c[2] is not None]
                    if calls:
                        self._square(name)
        finally:
            self.recording = True

    def _square(self, name: str) -> None:
        module, wanted, calls = self.modules[name], self.wanted[name], self.calls[name]
        with torch.no_grad():
            got = (_closed_form_squares if _closed_form(module) else _general_squares)(module, wanted, calls)
        for local, value in got.items():
            self.total[wanted[local]] += value
        calls.clear()


def _detached(v):
    return v.detach() if isinstance(v, torch.Tensor) else v


def _joined(ts: list[torch.Tensor], width: int) -> torch.Tensor:
    """The calls' ``(N, ..., width)`` tensors as one ``(N, T, width)`` float32 tensor, their tokens joined
    (a 2-D tensor: one token)."""
    flat = [t.reshape(t.shape[0], -1, width).float() for t in ts]
    return flat[0] if len(flat) == 1 else torch.cat(flat, dim=1)


def _squared(v: torch.Tensor) -> float:
    """``Σ v²`` (a float32 tensor squared and summed in float32: torch's cascaded sum stays within about
    1e-7 of the float64 sum, where a float64 sum would first copy the tensor)."""
    return float(v.square().sum())


def _closed_form_squares(module: nn.Module, wanted: dict, calls: list) -> dict[str, float]:
    """The squared per-sample gradients of a ``nn.Linear``'s or ``nn.LayerNorm``'s ``wanted`` parameters
    by the class docstring's formulas, from the calls' kept inputs and output gradients."""
    linear = _is_linear(module)
    width = module.out_features if linear else math.prod(module.normalized_shape)
    g = _joined([c[2] for c in calls], width)
    out = {"bias": _squared(g.sum(1))} if "bias" in wanted else {}
    if "weight" not in wanted:
        return out
    x = _joined([c[0][0] for c in calls], module.in_features if linear else width)
    if linear:
        per = max(1, MAX_VALUES // (module.in_features * module.out_features))
        out["weight"] = sum(float(torch.bmm(g[k:k + per].transpose(1, 2), x[k:k + per]).square_().sum())
                            for k in range(0, x.shape[0], per))  # (samples, out, in) at a time
    else:
        var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
        out["weight"] = _squared((g * ((x - mean) * torch.rsqrt(var + module.eps))).sum(1))
    return out


def _general_squares(module: nn.Module, wanted: dict, calls: list) -> dict[str, float]:
    """The squared per-sample gradients of ``module``'s own ``wanted`` parameters: ``vmap`` over samples
    of the ``vjp`` of the module alone at each call's inputs, the output's gradient the cotangent,
    summed over calls before squaring."""
    params = {local: getattr(module, local).detach() for local in wanted}
    n = calls[0][2].shape[0]

    def batched(v):
        return 0 if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == n else None

    totals = {local: 0.0 for local in wanted}
    for k in range(0, n, CHUNK):
        summed: dict[str, torch.Tensor] = {}
        for args, kwargs, grad in calls:
            args_dims = tuple(batched(a) for a in args)
            kwargs_dims = {key: batched(v) for key, v in kwargs.items()}

            def one(args_i, kwargs_i, g_i, args_dims=args_dims, kwargs_dims=kwargs_dims):
                a1 = tuple(a.unsqueeze(0) if d == 0 else a for a, d in zip(args_i, args_dims, strict=True))
                k1 = {key: v.unsqueeze(0) if kwargs_dims[key] == 0 else v for key, v in kwargs_i.items()}
                _, pull = vjp(lambda p: functional_call(module, p, a1, k1), params)
                return pull(g_i.unsqueeze(0))[0]

            sl = slice(k, k + CHUNK)
            args_k = tuple(a[sl] if d == 0 else a for a, d in zip(args, args_dims, strict=True))
            kwargs_k = {key: v[sl] if kwargs_dims[key] == 0 else v for key, v in kwargs.items()}
            got = vmap(one, in_dims=(args_dims, kwargs_dims, 0))(args_k, kwargs_k, grad[sl])
            for local, v in got.items():
                summed[local] = summed[local] + v if local in summed else v
        for local, v in summed.items():
            totals[local] += float(v.double().square().sum())
    return totals
