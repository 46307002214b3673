"""Time and size a plasticity measurement on a (large) timm model.

Prints, and writes as JSON (``--out DIR/profile.json``) with a plot of time per layer
(``DIR/profile_layers.png``):

- images/s of the plain forward, of forward + capture (a whole measurement step: hooks, reductions,
  result read on the host), of naive hooks with the paper's eager distance, and of the paper's protocol
  (outputs of every component on the host, then eager distances; on large models estimated from one
  block times the depth, and flagged as such);
- time per layer and per component, without and with capture;
- achieved GB/s of the reductions on block 0's tensors;
- peak memory of each (GPU: torch.cuda.max_memory_allocated; CPU: peak RSS deltas);
- host memory the paper's protocol would need for the batch.

Random weights are used (timing does not depend on them). The defaults finish in under a minute: on
a GPU ViT-Base/16, 64 images in bfloat16; on a CPU ViT-Tiny/16, 8 images in float32. Example (the
ViT-Huge configuration of bench/gpu_check.sh)::

    vitplast profile --model vit_huge_patch14_224 --device cuda --batch-size 256 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from pathlib import Path
from typing import Any

from ..options import parsing as T
from ..runtime.device import resolve_device
from ..options.fields import add_arguments as add_options
from ..options.fields import resolve, values_of
from ..outputs.plots import figure, save
from .options import DEVICE_DEFAULTS, ProfileOptions

OUTPUT_FILES = ("profile.json", "profile_layers.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``vitplast profile`` (:class:`vitplast.profile.options.ProfileOptions`)."""
    T.setup_parser(p)
    add_options(p, ProfileOptions)


def resolve_defaults(args) -> argparse.Namespace:
    """``args`` (checked options) with the device-dependent defaults filled in (a copy; ``device``
    resolved)."""
    args = argparse.Namespace(**vars(args))
    device = resolve_device(args.device)
    model, batch, dtype = DEVICE_DEFAULTS["cuda" if device.type == "cuda" else "cpu"]
    args.device = str(device)
    args.model = args.model or model
    args.batch_size = args.batch_size or batch
    args.dtype = T.DTYPE_ALIASES.get(args.dtype, args.dtype) or dtype
    return args


def _build(args: argparse.Namespace):
    import torch

    try:
        import timm
    except ImportError as exc:
        raise ValueError("vitplast profile builds its models with timm: pip install timm "
                         "(or the package's extra: pip install 'vitplast-kernels[apps]')") from exc

    if not timm.is_model(args.model):
        raise ValueError(f"--model {args.model!r} is not a timm model name")
    kwargs: dict[str, Any] = {"pretrained": False}
    if args.img_size:
        kwargs["img_size"] = args.img_size
    if args.depth:
        kwargs["depth"] = args.depth
    dtype = getattr(torch, args.dtype)
    device = resolve_device(args.device)
    try:
        cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else []
        # parameters created (and initialised, from seed 0: the run replays) on the device: fast for ViT-H
        with torch.random.fork_rng(devices=cuda), torch.device(device):
            torch.manual_seed(0)
            model = timm.create_model(args.model, **kwargs)
    except TypeError as exc:  # --img-size / --depth for a model that does not take them
        raise ValueError(f"--model {args.model}: {exc}") from None
    model = model.eval().to(device=device, dtype=dtype)
    cfg = model.pretrained_cfg if hasattr(model, "pretrained_cfg") else {}
    size = args.img_size or (cfg.get("input_size") or (3, 224, 224))[-1]
    need, have = args.batch_size * 3 * size * size * dtype.itemsize, _memory_bytes(device)
    if have and need > have:
        raise ValueError(f"--batch-size {args.batch_size}: the input batch alone needs {need / 1e9:,.1f} GB, "
                         f"more than the {have / 1e9:,.1f} GB of memory of {device}; choose a smaller "
                         "--batch-size")
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(args.batch_size, 3, size, size, generator=gen).to(device=device, dtype=dtype)
    return model, images


def _memory_bytes(device) -> int | None:
    """The memory of ``device`` (a GPU's, or the machine's physical memory for the CPU), or None."""
    import torch

    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def profile(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement of the module docstring, as one JSON-ready dict."""
    import torch

    import vitplast_kernels as vk

    from . import peers
    from . import profiler as pf

    args = resolve_defaults(resolve(ProfileOptions, values_of(args, ProfileOptions)))
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model, images = _build(args)
    device = images.device
    try:
        st = pf.structure(model)
    except ValueError as exc:
        if "no component found" not in str(exc):
            raise
        raise ValueError(f"--model {args.model}: {type(model).__name__} matches none of the component "
                         "presets and vitplast profile has no --component option: profile a model a preset "
                         "covers (timm ViT/DeiT, DINOv2, Eva, ...), or measure it with `vitplast measure "
                         "--component LABEL=GLOB`") from None
    n_layers = len(st.layers)
    n_modules = sum(len(n) for c in st.components for n in st.modules[c].values())
    rec: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_") and k != "command"},
        "model": args.model, "device": str(device), "dtype": args.dtype,
        "batch_size": args.batch_size,
        "protocol": args.protocol, "pairs": args.pairs, "image_size": images.shape[-1],
        "layers": n_layers, "components": list(st.components), "component_modules": n_modules,
        "params": sum(p.numel() for p in model.parameters()), "machine": _machine(device),
        "memory_method": pf.memory_method(device),
    }
    print(f"# {args.model}: {n_layers} layers, {n_modules} component modules, "
          f"{rec['params'] / 1e6:.0f}M params; batch {args.batch_size} x {tuple(images.shape[1:])} "
          f"{args.dtype} on {device}", flush=True)

    fns = {
        "forward": pf.forward_fn(model, images),
        "capture": pf.capture_fn(model, images, args.protocol, args.pairs),
        "naive_hooks": peers.naive_hooks_fn(model, images, st),
    }
    times = pf.time_variants(fns, device, args.reps)
    mem = {k: pf.peak_memory(fn, device) for k, fn in fns.items()}

    host = peers.paper_host_bytes(model, images, st)
    rec["paper_host_bytes"] = host
    mode = args.paper
    if mode == "auto":
        mode = "full" if host <= args.paper_max_gb * 1e9 else "one-block"
    if mode != "skip":
        paper_runs = [peers.paper_protocol(model, images, st, blocks=None if mode == "full" else 1)
                      for _ in range(max(1, min(args.reps, 3)))]
        secs = sorted(r["seconds"] for r in paper_runs)
        paper = dict(paper_runs[0], seconds=secs[len(secs) // 2], reps=len(secs), mode=mode)
        times["paper"] = {"median": paper["seconds"], "min": secs[0], "max": secs[-1], "reps": len(secs)}
        if mode == "full":
            mem["paper"] = pf.peak_memory(lambda: peers.paper_protocol(model, images, st), device)
        rec["paper"] = paper

    fwd = times["forward"]["median"]
    variants = {}
    for k, t in times.items():
        variants[k] = {"seconds": t["median"], "min_s": t["min"], "max_s": t["max"], "reps": t["reps"],
                       "images_per_s": args.batch_size / t["median"], "vs_forward": t["median"] / fwd,
                       "peak_bytes": mem.get(k, {}).get("peak"),
                       "peak_delta_bytes": mem.get(k, {}).get("delta")}
    rec["variants"] = variants
    cap = variants["capture"]
    rec["capture_overhead"] = cap["seconds"] / fwd - 1
    if mem["forward"]["peak"] and mem["capture"]["peak"]:
        rec["capture_peak_memory_overhead"] = mem["capture"]["peak"] / mem["forward"]["peak"] - 1
    if "paper" in variants:
        rec["speedup_vs_paper"] = variants["paper"]["seconds"] / cap["seconds"]
    rec["speedup_vs_naive_hooks"] = variants["naive_hooks"]["seconds"] / cap["seconds"]
    rec["reductions"] = pf.reduction_rate(model, images, st, pairs=args.pairs, reps=args.reps)
    # the kernels' share: steadier than the difference of two noisy forward times on a shared machine
    rec["reductions_share_of_forward"] = rec["reductions"]["per_forward_s"] / fwd
    if not args.no_layers:
        reps = max(1, min(args.reps, 3))
        rec["layer_times"] = {"forward": pf.layer_times(model, images, st, reps=reps),
                              "capture": pf.layer_times(model, images, st, reps=reps,
                                                        protocol=args.protocol, pairs=args.pairs)}
    rec["kernels_backend"] = vk.backends.select.resolve("auto", device).name
    return rec


def _machine(device) -> dict[str, Any]:
    import torch

    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": platform.processor() or platform.machine(), "cpu_cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f}"


def report(rec: dict[str, Any]) -> str:
    """The printed table of a :func:`profile` record."""
    lines = [f"{'variant':<12} {'s/batch':>9} {'images/s':>9} {'x forward':>9} {'peak GB':>8} "
             f"{'+GB':>7}"]
    names = {"forward": "forward", "capture": f"+capture ({rec['protocol']})", "naive_hooks": "naive hooks",
             "paper": "paper protocol"}
    for k, v in rec["variants"].items():
        lines.append(f"{k:<12} {v['seconds']:>9.4f} {v['images_per_s']:>9.1f} {v['vs_forward']:>9.2f} "
                     f"{_gb(v['peak_bytes']):>8} {_gb(v['peak_delta_bytes']):>7}   {names.get(k, '')}")
    out = ["\n".join(lines)]
    out.append(f"capture adds {100 * rec['capture_overhead']:.1f}% to the forward time"
               + (f", {100 * rec['capture_peak_memory_overhead']:.2f}% to its peak memory"
                  if "capture_peak_memory_overhead" in rec else ""))
    if "paper" in rec:
        p = rec["paper"]
        est = (f" (ESTIMATED: block 0 timed, per-block part x {rec['layers']})" if p["estimated"] else "")
        out.append(f"speed of forward + capture: {rec['speedup_vs_paper']:.1f}x the paper's protocol{est}, "
                   f"{rec['speedup_vs_naive_hooks']:.2f}x naive hooks")
    out.append(f"paper's protocol would hold {rec['paper_host_bytes'] / 1e9:.2f} GB on the host for this "
               "batch "
               f"(every component output of every block, both halves, {rec['dtype']})")
    r = rec["reductions"]
    out.append(f"reductions: {r['tensors']} distinct tensors of block 0, {r['bytes'] / 1e6:.1f} MB in "
               f"{1e3 * r['seconds']:.2f} ms = {r['GBps']:.1f} GB/s (backend {rec['kernels_backend']}); "
               f"x {rec['layers']} layers = {1e3 * r['per_forward_s']:.1f} ms per forward "
               f"({100 * rec['reductions_share_of_forward']:.1f}% of the forward)")
    out.append(f"memory: {rec['memory_method']}")
    if "layer_times" in rec:
        lt = rec["layer_times"]
        comps = list(lt["forward"]["per_component"])
        head = f"{'layer':<6} {'fwd ms':>8} {'+cap ms':>8} " + " ".join(f"{c:>7}" for c in comps)
        rows = [head + "   (component ms: forward / with capture)"]
        for lay, t in lt["forward"]["per_layer"].items():
            tc = lt["capture"]["per_layer"].get(lay)
            cells = " ".join(f"{1e3 * lt['forward']['per_component'][c].get(lay, 0):>7.2f}" for c in comps)
            rows.append(f"{lay:<6} {1e3 * t:>8.2f} {1e3 * tc if tc else 0:>8.2f} {cells}")
        capc = " ".join(f"{1e3 * sum(lt['capture']['per_component'][c].values()):>7.2f}" for c in comps)
        fwdc = " ".join(f"{1e3 * sum(lt['forward']['per_component'][c].values()):>7.2f}" for c in comps)
        rows.append(f"{'total':<6} {1e3 * sum(lt['forward']['per_layer'].values()):>8.2f} "
                    f"{1e3 * sum(lt['capture']['per_layer'].values()):>8.2f} {fwdc}")
        rows.append(f"{'':<6} {'':>8} {'':>8} {capc}   (with capture)")
        out.append("\n".join(rows))
    return "\n".join(out)


def plot_layers(rec: dict[str, Any], path: Path) -> None:
    lt = rec["layer_times"]
    layers = list(lt["forward"]["per_layer"])
    xs = range(len(layers))
    fig, axes = figure(1, 1, (max(6, 0.3 * len(layers) + 3), 4))
    ax = axes[0, 0]
    bottom = [0.0] * len(layers)
    for c, per in lt["forward"]["per_component"].items():
        vals = [1e3 * per.get(lay, 0.0) for lay in layers]
        ax.bar([x - 0.2 for x in xs], vals, 0.4, bottom=bottom, label=f"{c} (forward)")
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.bar([x + 0.2 for x in xs], [1e3 * lt["capture"]["per_layer"][lay] for lay in layers], 0.4,
           color="0.4", label=f"layer with capture ({rec['protocol']})")
    ax.plot([x - 0.2 for x in xs], [1e3 * lt["forward"]["per_layer"][lay] for lay in layers], "k_",
            markersize=8, label="layer (forward)")
    ax.set_xticks(list(xs), layers, fontsize=7)
    ax.set_xlabel("layer")
    ax.set_ylabel("ms per batch")
    ax.set_title(f"{rec['model']} batch {rec['batch_size']} {rec['dtype']} on {rec['device']}", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    save(fig, path, dpi=120)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vitplast profile``; returns the exit status (2 for any input error)."""
    from vitplast.runs.output_set import OutputSet
    from vitplast.runs.rundir import write_json_atomic

    out = OutputSet(args.out, OUTPUT_FILES)
    try:
        out.check()  # before the timing: a bad --out fails at once
        rec = profile(args)
        print(report(rec))
        with out.writing() as tmp:
            write_json_atomic(tmp / "profile.json", rec)
            if "layer_times" in rec:
                plot_layers(rec, tmp / "profile_layers.png")
    except (ValueError, OSError) as exc:
        return T.fail("vitplast profile", exc)
    written = [f for f in OUTPUT_FILES if (out.target / f).exists()]
    print(f"# wrote {', '.join(str(out.target / f) for f in written)}")
    return 0
