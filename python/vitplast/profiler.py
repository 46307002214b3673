"""Measurements behind ``vitplast profile`` and bench/end_to_end.py: what a plasticity measurement costs.

For a model and a batch ``images`` of ``N`` sequences (``N = 2B`` for ``pairs="halves"``):

- ``time_variants``: seconds per batch (medians of interleaved rounds) of
  ``forward`` (the plain forward under ``no_grad``), ``capture`` (forward inside
  ``vitplast_kernels.capture`` then ``pairwise_plasticity`` and a host read of its statistics: one
  whole measurement step) and ``naive_hooks`` (forward hooks computing the paper's eager distance
  ``((x - y) ** 2).flatten(1).sum(-1).sqrt()`` of every component's input and output halves);
- ``paper_protocol``: the paper's protocol implemented naively: the tokens ``e`` entering the first
  block, for each half of the batch every component of every block applied to ``e`` (FC2 to ``e``
  zero-padded) and its output copied to the host, then per output both halves moved back to the device
  and the eager distance taken. With ``blocks=1`` only block 0 runs and the per-block part is scaled
  by the depth (an estimate, flagged in the result);
- ``layer_times``: time per layer and per component of the forward (with or without capture), from
  pre/post forward hooks (CUDA events on GPU, ``perf_counter`` on CPU);
- ``reduction_rate``: bytes and seconds of reducing block 0's distinct tensors with the capture's pairing
  (the kernels' achieved GB/s inside a real model);
- ``peak_memory``: peak device memory of a call (``torch.cuda.max_memory_allocated`` on GPU; on CPU the
  process's peak resident set, ``VmHWM`` after resetting it through ``/proc/self/clear_refs``);
- ``paper_host_bytes``: host memory the paper's protocol needs for one batch (every component output of
  every block, both halves, in the activations' dtype).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import vitplast_kernels as vk
from vitplast_kernels import presets


def eager_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The paper's formula: ``(B, ...) x (B, ...) -> (B,)`` distances in the inputs' dtype."""
    return ((x - y) ** 2).flatten(1).sum(-1).sqrt()


# --- timing -----------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds of one call of ``fn`` (device synchronised before and after)."""
    _sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_rounds(fns: dict[str, Callable[[], Any]], device: torch.device, reps: int,
                warmup: int = 1) -> dict[str, dict[str, float]]:
    """``{name: {median, min, max, reps}}`` seconds from ``reps`` interleaved rounds (order rotated)."""
    names = list(fns)
    for n in names:
        for _ in range(warmup):
            time_once(fns[n], device)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for n in names[r % len(names):] + names[: r % len(names)]:
            times[n].append(time_once(fns[n], device))
    return {n: {"median": statistics.median(ts), "min": min(ts), "max": max(ts), "reps": len(ts)}
            for n, ts in times.items()}


# --- model structure --------------------------------------------------------------------------


@dataclass
class Structure:
    """Components of a model: ``modules[component][layer] = (module names)``, layers in block order,
    ``block[layer]`` the module holding the layer's components, ``embedding`` the decomposition's ``e``."""

    components: tuple[str, ...]
    layers: tuple[tuple[str, ...], ...]
    modules: dict[str, dict[tuple[str, ...], tuple[str, ...]]]
    block: dict[tuple[str, ...], str]
    embedding: str


def structure(model: nn.Module) -> Structure:
    """The detected preset resolved on ``model`` (ValueError when no preset matches)."""
    p = presets.detect(model)
    order = [c for c in presets.COMPONENTS if c in p.components]
    layers, modules = presets.resolve(model, {c: p.components[c] for c in order})
    block = {}
    for key in layers:
        names = [n for c in order for n in modules[c].get(key, ())]
        parts = [n.split(".") for n in names]
        common = []
        for segs in zip(*parts, strict=False):
            if len(set(segs)) != 1:
                break
            common.append(segs[0])
        block[key] = ".".join(common)
    return Structure(tuple(order), tuple(layers), modules, block, p.embedding)


def layer_label(key: tuple[str, ...]) -> str:
    return ".".join(key) or "0"


# --- variants ---------------------------------------------------------------------------------


def forward_fn(model: nn.Module, images: torch.Tensor) -> Callable[[], Any]:
    def run():
        with torch.no_grad():
            return model(images)

    return run


def capture_fn(model: nn.Module, images: torch.Tensor, protocol: str, pairs: str) -> Callable[[], Any]:
    """One measurement step: capture around the forward, the result, its statistics read on the host."""

    def run():
        with torch.no_grad(), vk.capture(model, protocol=protocol, pairs=pairs) as acts:
            model(images)
        res = vk.pairwise_plasticity(acts)
        return res.stats.cpu()

    return run


@contextlib.contextmanager
def naive_hooks(model: nn.Module, st: Structure, out: list[torch.Tensor]) -> Iterator[None]:
    """Forward hooks computing eager distance ratios of every component's input/output halves into
    ``out`` (one ``(B,)`` tensor per component call, left on the device)."""

    def hook(_mod, args, output):
        x = args[0]
        y = output[0] if isinstance(output, tuple) else output
        b = x.shape[0] // 2
        out.append(eager_distance(y[:b], y[b:]) / eager_distance(x[:b], x[b:]))

    named = dict(model.named_modules())
    handles = [named[n].register_forward_hook(hook)
               for c in st.components for names in st.modules[c].values() for n in names]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def naive_hooks_fn(model: nn.Module, images: torch.Tensor, st: Structure) -> Callable[[], Any]:
    def run():
        rates: list[torch.Tensor] = []
        with torch.no_grad(), naive_hooks(model, st, rates):
            model(images)
        return torch.stack([r.float().mean() for r in rates]).cpu()

    return run


# --- the paper's protocol ---------------------------------------------------------------------


class _StopForward(Exception):
    pass


def embedding_tokens(model: nn.Module, images: torch.Tensor, st: Structure) -> torch.Tensor:
    """``e``: what the decomposition's embedding spec names (the first block's input for timm), obtained
    by running the model only up to it."""
    name, _, which = st.embedding.partition(":")
    found = presets.match(name, dict(model.named_modules()))
    if len(found) != 1:
        raise ValueError(f"embedding {st.embedding!r} must match one module, matched {len(found)}")
    module = dict(model.named_modules())[next(iter(found.values()))]
    got: list[torch.Tensor] = []

    def pre(_m, args):
        got.append(args[0])
        raise _StopForward

    def post(_m, _args, output):
        got.append(output[0] if isinstance(output, tuple) else output)
        raise _StopForward

    h = module.register_forward_pre_hook(pre) if which == "input" else module.register_forward_hook(post)
    try:
        with torch.no_grad():
            model(images)
    except _StopForward:
        pass
    finally:
        h.remove()
    return got[0]


def _pad_to(e: torch.Tensor, width: int) -> torch.Tensor:
    if width <= e.shape[-1]:
        return e
    return torch.cat([e, e.new_zeros(*e.shape[:-1], width - e.shape[-1])], dim=-1)


def _decomposition_outputs(model: nn.Module, e: torch.Tensor, st: Structure,
                           layers: tuple[tuple[str, ...], ...]) -> dict[str, torch.Tensor]:
    """Every component of ``layers`` applied to ``e``, each output copied to the host (as the paper)."""
    named = dict(model.named_modules())
    host = {}
    with torch.no_grad():
        for key in layers:
            for c in st.components:
                for n in st.modules[c].get(key, ()):
                    mod = named[n]
                    inp = _pad_to(e, mod.in_features) if c == "FC2" and hasattr(mod, "in_features") else e
                    y = mod(inp)
                    y = y[0] if isinstance(y, tuple) else y
                    host[f"{layer_label(key)}.{c}.{n}"] = y.to("cpu", copy=True)
    return host


def paper_protocol(model: nn.Module, images: torch.Tensor, st: Structure, *, blocks: int | None = None
                   ) -> dict[str, Any]:
    """Runs the paper's protocol once on ``images`` (halves = the two batches); returns seconds.

    ``blocks=None``: every block (the real protocol). ``blocks=1``: block 0 only and the per-block
    seconds scaled by the depth: ``seconds`` is then an estimate (``estimated=True``).
    """
    device = images.device
    n_layers = len(st.layers)
    layers = st.layers if blocks is None else st.layers[:blocks]
    b = images.shape[0] // 2
    _sync(device)
    t0 = time.perf_counter()
    es, outs = [], []
    for half in (images[:b], images[b:]):
        es.append(embedding_tokens(model, half, st))
    _sync(device)
    t_embed = time.perf_counter() - t0
    t1 = time.perf_counter()
    for e in es:
        outs.append(_decomposition_outputs(model, e, st, layers))
    d_in = eager_distance(es[0], es[1])
    rates = []
    for k in list(outs[0]):
        z1, z2 = outs[0].pop(k).to(device), outs[1].pop(k).to(device)
        rates.append((eager_distance(z1, z2) / d_in).cpu())
    t_blocks = time.perf_counter() - t1
    scale = n_layers / len(layers)
    return {"seconds": t_embed + t_blocks * scale, "estimated": scale != 1, "blocks_run": len(layers),
            "embed_s": t_embed, "blocks_s": t_blocks, "n_rates": len(rates)}


def paper_host_bytes(model: nn.Module, images: torch.Tensor, st: Structure) -> int:
    """Host bytes the paper's protocol holds for one batch: every component output of every block for
    both halves, in the outputs' dtype (from block 0's output shapes times the depth)."""
    b = images.shape[0] // 2
    sizes: list[int] = []
    _forward_with_block0_hooks(
        model, images, st,
        lambda _m, _a, o: sizes.append((o[0] if isinstance(o, tuple) else o)[:b].nbytes))
    return 2 * sum(sizes) * len(st.layers)


def _forward_with_block0_hooks(model: nn.Module, images: torch.Tensor, st: Structure, hook) -> None:
    """One no_grad forward with ``hook`` on every component module of the first layer."""
    named = dict(model.named_modules())
    hooks = [named[n].register_forward_hook(hook)
             for c in st.components for n in st.modules[c].get(st.layers[0], ())]
    try:
        with torch.no_grad():
            model(images)
    finally:
        for h in hooks:
            h.remove()


# --- per layer / per component times ----------------------------------------------------------


def layer_times(model: nn.Module, images: torch.Tensor, st: Structure, *, reps: int = 3,
                protocol: str | None = None, pairs: str = "halves") -> dict[str, Any]:
    """Median seconds per layer (block module) and per (component, layer) of the forward; with
    ``protocol`` the forward runs inside a capture and each time includes that component's reductions
    (the timing hooks are registered after the capture's, so they fire after them)."""
    device = images.device
    named = dict(model.named_modules())
    targets = {f"layer/{layer_label(k)}": st.block[k] for k in st.layers}
    for c in st.components:
        for k in st.layers:
            for i, n in enumerate(st.modules[c].get(k, ())):
                targets[f"{c}/{layer_label(k)}" + (f"/{i}" if i else "")] = n
    samples: dict[str, list[float]] = {t: [] for t in targets}
    cuda = device.type == "cuda"
    marks: dict[str, list[Any]] = {}

    def stamp():
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def pre(label, *_):
        marks[label] = [stamp()]

    def post(label, *_):
        marks[label].append(stamp())

    for r in range(reps + 1):  # the first pass warms up
        marks.clear()
        ctx = (vk.capture(model, protocol=protocol, pairs=pairs) if protocol else contextlib.nullcontext())
        with torch.no_grad(), ctx:
            handles = []
            for label, n in targets.items():
                handles.append(named[n].register_forward_pre_hook(lambda m, a, label=label: pre(label)))
                handles.append(named[n].register_forward_hook(lambda m, a, o, label=label: post(label)))
            try:
                model(images)
            finally:
                for h in handles:
                    h.remove()
        _sync(device)
        if r == 0:
            continue
        for label, (s, e) in marks.items():
            samples[label].append(s.elapsed_time(e) / 1e3 if cuda else e - s)
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    per_layer = {k.split("/", 1)[1]: v for k, v in med.items() if k.startswith("layer/")}
    per_component: dict[str, dict[str, float]] = {}
    for k, v in med.items():
        c, _, rest = k.partition("/")
        if c != "layer":
            lay = rest.split("/")[0]
            per_component.setdefault(c, {})[lay] = per_component.get(c, {}).get(lay, 0.0) + v
    return {"per_layer": per_layer, "per_component": per_component}


# --- reductions and memory --------------------------------------------------------------------


def reduction_rate(model: nn.Module, images: torch.Tensor, st: Structure, *, pairs: str = "halves",
                   reps: int = 5) -> dict[str, float]:
    """Bytes and median seconds of reducing block 0's distinct component inputs/outputs (each read once)
    with the capture's pairing, in one grouped call: the kernels' GB/s on this model's tensors."""
    seen: dict[int, torch.Tensor] = {}

    def hook(_m, args, output):
        for t in (args[0], output[0] if isinstance(output, tuple) else output):
            seen.setdefault(id(t), t)

    _forward_with_block0_hooks(model, images, st, hook)
    tensors = list(seen.values())
    pairing = vk.get_pairing(pairs)
    t = time_rounds({"reduce": lambda: pairing.sq_sums(tensors)}, images.device, reps)["reduce"]["median"]
    nbytes = sum(x.nbytes for x in tensors)
    return {"tensors": len(tensors), "bytes": nbytes, "seconds": t, "GBps": nbytes / t / 1e9,
            "per_forward_s": t * len(st.layers)}


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_method(device: torch.device) -> str:
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated (bytes above the memory allocated before the call)"
    return "peak RSS of the process (VmHWM reset through /proc/self/clear_refs) minus RSS before the call"


def peak_memory(fn: Callable[[], Any], device: torch.device) -> dict[str, int | None]:
    """Peak bytes while ``fn`` runs: ``peak`` (absolute) and ``delta`` (above what was in use before)."""
    if device.type == "cuda":
        _sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        _sync(device)
        peak = torch.cuda.max_memory_allocated(device)
        return {"peak": peak, "delta": peak - base}
    if not _reset_hwm():
        fn()
        return {"peak": None, "delta": None}
    base = _vm_hwm()
    fn()
    peak = _vm_hwm()
    return {"peak": peak, "delta": None if peak is None or base is None else peak - base}
