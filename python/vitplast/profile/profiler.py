"""Measurements behind ``vitplast profile`` and bench/end_to_end.py: what a plasticity measurement costs.

For a model and a batch ``images`` of ``N`` sequences (``N = 2B`` for ``pairs="halves"``):

- ``structure``: the components, layers and modules that ``vitplast_kernels.capture`` hooks on the
  model (the capture's own resolution of the detected preset), and the block module of each layer;
- ``time_variants``: seconds per batch (medians of interleaved rounds, ``vitplast_kernels.timing``) of
  ``forward`` (the plain forward under ``no_grad``), ``capture`` (forward inside
  ``vitplast_kernels.capture`` then ``pairwise_plasticity`` and a host read of its statistics: one
  whole measurement step) and the peers of ``profiler_peers`` (naive hooks, the paper's protocol);
- ``layer_times``: time per layer and per component of the forward (with or without capture), from
  pre/post forward hooks (``vitplast_kernels.timing.mark``: CUDA events on GPU, ``perf_counter`` on CPU);
- ``reduction_rate``: bytes and seconds of reducing block 0's distinct tensors with the capture's pairing
  (the kernels' achieved GB/s inside a real model);
- ``peak_memory``: peak device memory of a call (``torch.cuda.max_memory_allocated`` on GPU; on CPU the
  process's peak resident set, ``VmHWM`` after resetting it through ``/proc/self/clear_refs``).
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import vitplast_kernels as vk
from vitplast_kernels import timing
from vitplast_kernels.measure import presets


# --- model structure --------------------------------------------------------------------------
@dataclass
class Structure:
    """Components of a model: ``modules[component][layer] = (module names)``, ``layers`` the capture's
    layer labels in block order, ``block[layer]`` the module holding the layer's components,
    ``embedding`` the decomposition's ``e`` (a preset embedding spec)."""

    components: tuple[str, ...]
    layers: tuple[str, ...]
    modules: dict[str, dict[str, tuple[str, ...]]]
    block: dict[str, str]
    embedding: str


def structure(model: nn.Module) -> Structure:
    """What ``vk.capture(model)`` measures (ValueError when no preset matches); no hook is attached."""
    cap = vk.capture(model)
    keys = sorted({k for per_layer in cap.modules.values() for k in per_layer}, key=presets.layer_sort_key)
    if len(keys) != len(cap.layers):
        raise ValueError(f"capture layers {cap.layers} do not match its modules' layer keys {keys}")
    label = dict(zip(keys, cap.layers, strict=True))
    modules = {c: {label[k]: names for k, names in cap.modules[c].items()} for c in cap.components}
    # the block: the dotted prefix its component modules' names share
    block = {lay: ".".join(os.path.commonprefix([n.split(".") for c in cap.components
                                                 for n in modules[c].get(lay, ())])) for lay in cap.layers}
    return Structure(tuple(cap.components), tuple(cap.layers), modules, block, cap.embedding)


def first_tensor(output: Any) -> torch.Tensor:
    """A module's output tensor (the first of a tuple)."""
    return output[0] if isinstance(output, tuple) else output


def forward_with_hooks(model: nn.Module, images: torch.Tensor, st: Structure, hook,
                       layer: str | None = None) -> None:
    """One ``no_grad`` forward with the forward hook ``hook`` on every component module (of ``layer``
    only, when given), registered in component order."""
    named = dict(model.named_modules())
    layers = st.layers if layer is None else (layer,)
    handles = [named[n].register_forward_hook(hook) for c in st.components for lay in layers
               for n in st.modules[c].get(lay, ())]
    try:
        with torch.no_grad():
            model(images)
    finally:
        for h in handles:
            h.remove()


# --- variants and their times -----------------------------------------------------------------
def forward_fn(model: nn.Module, images: torch.Tensor) -> Callable[[], Any]:
    def run():
        with torch.no_grad():
            return model(images)

    return run


def capture_fn(model: nn.Module, images: torch.Tensor, protocol: str, pairs: str) -> Callable[[], Any]:
    """One measurement step with a capture built once (component match, hooks' closures, accumulators)
    and kept between steps, as a measurement keeps it over its batches: attach, forward, detach, the
    result's statistics read on the host. The sums accumulate over the steps; between steps the model
    runs without hooks."""
    cap = vk.capture(model, protocol=protocol, pairs=pairs)

    def run():
        with torch.no_grad(), cap:
            model(images)
        return vk.pairwise_plasticity(cap).stats.cpu()

    return run


def time_variants(fns: dict[str, Callable[[], Any]], device: torch.device, reps: int,
                  warmup: int = 1) -> dict[str, dict[str, float]]:
    """``{name: {median, min, max, reps}}`` seconds per call from ``reps`` interleaved rounds."""
    samples = timing.interleaved_samples(fns, device=device, rounds=reps, warmup=warmup)
    return {n: {"median": statistics.median(ts) / 1e3, "min": min(ts) / 1e3, "max": max(ts) / 1e3,
                "reps": len(ts)} for n, ts in samples.items()}


# --- per layer / per component times ----------------------------------------------------------
def layer_times(model: nn.Module, images: torch.Tensor, st: Structure, *, reps: int = 3,
                protocol: str | None = None, pairs: str = "halves") -> dict[str, Any]:
    """Median seconds per layer (block module) and per (component, layer) of the forward; with
    ``protocol`` the forward runs inside a capture and each time includes that component's reductions
    (the timing hooks are registered after the capture's, so they fire after them)."""
    device = images.device
    named = dict(model.named_modules())
    targets = {f"layer/{lay}": st.block[lay] for lay in st.layers}
    targets.update({f"{c}/{lay}" + (f"/{i}" if i else ""): n for c in st.components for lay in st.layers
                    for i, n in enumerate(st.modules[c].get(lay, ()))})
    samples: dict[str, list[float]] = {t: [] for t in targets}
    marks: dict[str, list[Any]] = {}

    def pre(label):
        marks[label] = [timing.mark(device)]

    for r in range(reps + 1):  # the first pass warms up
        marks.clear()
        ctx = (vk.capture(model, protocol=protocol, pairs=pairs) if protocol else contextlib.nullcontext())
        with torch.no_grad(), ctx:
            hooks = [h for label, n in targets.items() for h in (
                named[n].register_forward_pre_hook(lambda m, a, label=label: pre(label)),
                named[n].register_forward_hook(lambda m, a, o, label=label: marks[label].append(
                    timing.mark(device))))]
            try:
                model(images)
            finally:
                for h in hooks:
                    h.remove()
        if r:
            for label, (s, e) in marks.items():
                samples[label].append(timing.elapsed_ms(s, e) / 1e3)
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    per_component: dict[str, dict[str, float]] = {}
    for k, v in med.items():
        c, _, rest = k.partition("/")
        if c != "layer":
            per = per_component.setdefault(c, {})
            per[rest.split("/")[0]] = per.get(rest.split("/")[0], 0.0) + v
    return {"per_layer": {k[len("layer/"):]: v for k, v in med.items() if k.startswith("layer/")},
            "per_component": per_component}


# --- reductions and memory --------------------------------------------------------------------
def reduction_rate(model: nn.Module, images: torch.Tensor, st: Structure, *, pairs: str = "halves",
                   reps: int = 5) -> dict[str, float]:
    """Bytes and median seconds of reducing block 0's distinct component inputs/outputs (each read once)
    with the capture's pairing, in one grouped call: the kernels' GB/s on this model's tensors."""
    seen: dict[int, torch.Tensor] = {}

    def hook(_m, args, output):
        for t in (args[0], first_tensor(output)):
            seen.setdefault(id(t), t)

    forward_with_hooks(model, images, st, hook, st.layers[0])
    tensors = list(seen.values())
    pairing = vk.get_pairing(pairs)
    t = timing.median_ms(lambda: pairing.sq_sums(tensors), device=images.device, reps=reps, warmup=1) / 1e3
    nbytes = sum(x.nbytes for x in tensors)
    return {"tensors": len(tensors), "bytes": nbytes, "seconds": t, "GBps": nbytes / t / 1e9,
            "per_forward_s": t * len(st.layers)}


def _vm_hwm() -> int | None:
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), None)
    return None


def _reset_hwm() -> bool:
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")
        return True
    return False


def memory_method(device: torch.device) -> str:
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated (bytes above the memory allocated before the call)"
    return "peak RSS of the process (VmHWM reset through /proc/self/clear_refs) minus RSS before the call"


def peak_memory(fn: Callable[[], Any], device: torch.device) -> dict[str, int | None]:
    """Peak bytes while ``fn`` runs: ``peak`` (absolute) and ``delta`` (above what was in use before)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        return {"peak": peak, "delta": peak - base}
    reset = _reset_hwm()
    base = _vm_hwm() if reset else None
    fn()
    peak = _vm_hwm() if reset else None
    return {"peak": peak, "delta": None if peak is None or base is None else peak - base}
