"""``profile(opts)``: what a plasticity measurement costs on a (large) timm model, behind ``vitplast
profile`` (its options: `ProfileOptions`; what is timed: the command's HELP).

The model is any name the other commands take (a timm name with its tags, ``hf-hub:ORG/NAME``,
``local-dir:DIR``, ``hf:ID_OR_DIR`` for a transformers model), always with random weights (timing does
not depend on them; no flag is needed), created from seed 0 on the device in ``--dtype``; with ``--amp``
every timed forward runs under that autocast. ``--out`` is checked before anything is built or timed.
``profile.json`` carries the reproducibility record (`vitplast.runs.provenance.provenance`).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
from collections.abc import Callable
from typing import Any

import torch

import vitplast_kernels as vk

from ..models.builder import BuiltModel, input_size
from ..models.families import family_of
from ..models.hf_models import create_hf
from ..models.sources import model_source
from ..models.timm_models import check_timm_name
from ..options.fields import fields_of, options_for
from ..outputs.reporter import Reporter
from ..runs.output_set import OutputSet
from ..runs.provenance import provenance
from ..runs.rundir import write_json_atomic
from ..runtime.device import resolve_device
from ..runtime.precision import autocast
from . import peers
from . import profiler as pf
from .options import ProfileOptions
from .report import plot_layers, precision, report

OUTPUT_FILES = ("profile.json", "profile_layers.png")


def profile(opts: ProfileOptions | None = None, /, *, reporter: Reporter | None = None,
            **keywords: Any) -> dict[str, Any]:
    """Profile a measurement: the record of the module docstring, printed as a table (on ``reporter``;
    default: stdout) and written to ``out`` as one set; returns the record.

    ``opts``: a `ProfileOptions`, checked again here; or the options as keywords (each the option of
    ``vitplast profile`` with that name, None: its default); keywords given with ``opts`` replace its values.
    """
    opts = profile_options(opts, keywords)
    say = (reporter or Reporter()).say
    out = OutputSet(opts.out, OUTPUT_FILES)
    out.check()  # before the timing: a bad --out fails at once
    rec = measurements(opts, say)
    say(report(rec))
    with out.writing() as tmp:
        write_json_atomic(tmp / "profile.json", rec)
        if "layer_times" in rec:
            plot_layers(rec, tmp / "profile_layers.png")
    written = [f for f in OUTPUT_FILES if (out.target / f).exists()]
    say(f"# wrote {', '.join(str(out.target / f) for f in written)}")
    return rec


def profile_options(opts: ProfileOptions | None, keywords: dict[str, Any]) -> ProfileOptions:
    """The checked options of `profile`: ``keywords`` (over ``opts``' values when given) resolved
    into a new `ProfileOptions`."""
    return options_for(ProfileOptions, opts, keywords)


def _random_model(opts: ProfileOptions, device):
    """The model ``opts.model`` names with random weights from seed 0, created on ``device``: a timm
    model (any name timm takes) or a transformers one (``hf:``, from its config)."""
    try:
        import timm
    except ImportError as exc:
        raise ValueError("vitplast profile builds its models with timm: pip install timm "
                         "(or the package's extra: pip install 'vitplast-kernels[apps]')") from exc

    source = model_source(opts.model)
    if not family_of(opts.model).profiled:
        raise ValueError(f"--model {opts.model}: profile times timm and transformers models (the digits ViT "
                         "is vit_tiny_patch16_224 resized: profile that)")
    kwargs = _size_kwargs(opts)
    if source.kind == "hf" and kwargs:
        raise ValueError(f"--img-size/--depth: {opts.model} takes its config's (a transformers model)")
    if source.kind == "timm":
        try:
            check_timm_name(source.ref)
        except ValueError as exc:
            raise ValueError(f"--model: {exc}") from None
    cuda = ([device.index if device.index is not None else torch.cuda.current_device()]
            if device.type == "cuda" else [])
    # parameters created (and initialised, from seed 0: the run replays) on the device: fast for ViT-H
    with torch.random.fork_rng(devices=cuda), torch.device(device):
        torch.manual_seed(0)
        if source.kind == "hf":
            return create_hf(source.ref, random_init=True)
        try:
            return timm.create_model(source.ref, pretrained=False, **kwargs)
        # TypeError: --img-size / --depth for a model that does not take them; RuntimeError: an hf-hub: or
        # local-dir: config naming no timm architecture
        except (TypeError, RuntimeError) as exc:
            raise ValueError(f"--model {opts.model}: {exc}") from None


def _size_kwargs(opts: ProfileOptions) -> dict[str, int]:
    """The model's constructor keywords of ``--img-size`` and ``--depth``, where given."""
    return {k: v for k, v in (("img_size", opts.img_size), ("depth", opts.depth)) if v}


def build_model_and_images(opts: ProfileOptions):
    """The model of ``opts`` (random weights from seed 0, in eval mode, on its device in its dtype) and
    a batch of random images for it; ValueError for a name no loader knows, options the model does not
    take, or a batch larger than the device's memory."""
    dtype = getattr(torch, opts.dtype)
    device = resolve_device(opts.device)
    model = _random_model(opts, device).eval().to(device=device, dtype=dtype)
    cfg = getattr(model, "pretrained_cfg", {})
    size = opts.img_size or input_size(model, (cfg.get("input_size") or (3, 224, 224))[-1])
    need, have = opts.batch_size * 3 * size * size * dtype.itemsize, _memory_bytes(device)
    if have and need > have:
        raise ValueError(f"--batch-size {opts.batch_size}: the input batch alone needs {need / 1e9:,.1f} GB, "
                         f"more than the {have / 1e9:,.1f} GB of memory of {device}; choose a smaller "
                         "--batch-size")
    images = torch.randn(opts.batch_size, 3, size, size, generator=torch.Generator().manual_seed(0))
    return model, images.to(device=device, dtype=dtype)


def _memory_bytes(device) -> int | None:
    """The memory of ``device`` (a GPU's, or the machine's physical memory for the CPU), or None."""
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def _structure(model, opts: ProfileOptions):
    """The model's components (`vitplast.profile.profiler.structure`), or ValueError saying which
    models profile covers."""
    try:
        return pf.structure(model)
    except ValueError as exc:
        if "no component found" not in str(exc):
            raise
        raise ValueError(f"--model {opts.model}: {type(model).__name__} matches none of the component "
                         "presets and vitplast profile has no --component option: profile a model a preset "
                         "covers (timm ViT/DeiT, DINOv2, Eva, ...), or measure it with `vitplast measure "
                         "--component LABEL=GLOB`") from None


def measurements(opts: ProfileOptions, log: Callable[[str], None]) -> dict[str, Any]:
    """Every measurement of the module docstring, as one JSON-ready dict (nothing is written)."""
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    model, images = build_model_and_images(opts)
    device = images.device
    st = _structure(model, opts)
    rec: dict[str, Any] = {
        "args": fields_of(type(opts), opts), "model": opts.model, "device": str(device), "dtype": opts.dtype,
        "amp": opts.amp, "batch_size": opts.batch_size, "protocol": opts.protocol, "pairs": opts.pairs,
        "image_size": images.shape[-1], "layers": len(st.layers), "components": list(st.components),
        "component_modules": sum(len(n) for c in st.components for n in st.modules[c].values()),
        "params": sum(p.numel() for p in model.parameters()), "machine": _machine(device),
        "memory_method": pf.memory_method(device), "provenance": _provenance(opts, model, images)}
    log(f"# {opts.model}: {rec['layers']} layers, {rec['component_modules']} component modules, "
        f"{rec['params'] / 1e6:.0f}M params; batch {opts.batch_size} x {tuple(images.shape[1:])} "
        f"{precision(rec)} on {device}")
    with autocast(opts.amp, device)():
        rec.update(_variants(opts, model, images, st))
        rec["reductions"] = pf.reduction_rate(model, images, st, pairs=opts.pairs, reps=opts.reps)
        if not opts.no_layers:
            reps = max(1, min(opts.reps, 3))
            rec["layer_times"] = {"forward": pf.layer_times(model, images, st, reps=reps),
                                  "capture": pf.layer_times(model, images, st, reps=reps,
                                                            protocol=opts.protocol, pairs=opts.pairs)}
    # the kernels' share: steadier than the difference of two noisy forward times on a shared machine
    rec["reductions_share_of_forward"] = (rec["reductions"]["per_forward_s"]
                                          / rec["variants"]["forward"]["seconds"])
    rec["kernels_backend"] = vk.backends.select.resolve("auto", device).name
    return rec


def _variants(opts: ProfileOptions, model, images, st) -> dict[str, Any]:
    """Seconds, images/s and peak memory of the forward, forward + capture, naive hooks and (per
    ``--paper``) the paper's protocol, with the ratios between them."""
    device = images.device
    fns = {"forward": pf.forward_fn(model, images),
           "capture": pf.capture_fn(model, images, opts.protocol, opts.pairs),
           "naive_hooks": peers.naive_hooks_fn(model, images, st)}
    times = pf.time_variants(fns, device, opts.reps)
    mem = {k: pf.peak_memory(fn, device) for k, fn in fns.items()}
    out: dict[str, Any] = {"paper_host_bytes": peers.paper_host_bytes(model, images, st)}
    mode = opts.paper if opts.paper != "auto" else (  # auto: full when its host memory is under the bound
        "full" if out["paper_host_bytes"] <= opts.paper_max_gb * 1e9 else "one-block")
    if mode != "skip":
        paper_runs = [peers.paper_protocol(model, images, st, blocks=None if mode == "full" else 1)
                      for _ in range(max(1, min(opts.reps, 3)))]
        secs = sorted(r["seconds"] for r in paper_runs)
        out["paper"] = dict(paper_runs[0], seconds=secs[len(secs) // 2], reps=len(secs), mode=mode)
        times["paper"] = {"median": out["paper"]["seconds"], "min": secs[0], "max": secs[-1],
                          "reps": len(secs)}
        if mode == "full":
            mem["paper"] = pf.peak_memory(lambda: peers.paper_protocol(model, images, st), device)
    fwd = times["forward"]["median"]
    out["variants"] = variants = {
        k: {"seconds": t["median"], "min_s": t["min"], "max_s": t["max"], "reps": t["reps"],
            "images_per_s": opts.batch_size / t["median"], "vs_forward": t["median"] / fwd,
            "peak_bytes": mem.get(k, {}).get("peak"), "peak_delta_bytes": mem.get(k, {}).get("delta")}
        for k, t in times.items()}
    cap = variants["capture"]
    out["capture_overhead"] = cap["seconds"] / fwd - 1
    if mem["forward"]["peak"] and mem["capture"]["peak"]:
        out["capture_peak_memory_overhead"] = mem["capture"]["peak"] / mem["forward"]["peak"] - 1
    if "paper" in variants:
        out["speedup_vs_paper"] = variants["paper"]["seconds"] / cap["seconds"]
    out["speedup_vs_naive_hooks"] = variants["naive_hooks"]["seconds"] / cap["seconds"]
    return out


def _provenance(opts: ProfileOptions, model, images) -> dict[str, Any]:
    """The reproducibility record of a profile: random weights (from seed 0), random images."""
    built = BuiltModel(model, images.shape[-1], opts.model, opts.model, _size_kwargs(opts), None,
                       {"kind": "random"})
    return provenance(built, {"images": f"standard normal, seed 0, {tuple(images.shape)}"}, None)


def _machine(device) -> dict[str, Any]:
    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": platform.processor() or platform.machine(), "cpu_cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as f:
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
