"""What ``vitplast profile`` shows of a `vitplast.profile.profile` record: the printed table
(`report`) and the plot of time per layer and component (`plot_layers`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..outputs.plots import figure, legend_outside, save


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f}"


def precision(rec: dict[str, Any]) -> str:
    """The record's weights dtype, and its autocast when there was one."""
    amp = rec.get("amp", "none")
    return rec["dtype"] if amp == "none" else f"{rec['dtype']} under {amp} autocast"


def report(rec: dict[str, Any]) -> str:
    """The printed table of a `profile` record."""
    lines = [f"{'variant':<12} {'s/batch':>9} {'images/s':>9} {'x forward':>9} {'peak GB':>8} {'+GB':>7}"]
    names = {"forward": "forward", "capture": f"+capture ({rec['protocol']})", "naive_hooks": "naive hooks",
             "paper": "paper protocol"}
    for k, v in rec["variants"].items():
        lines.append(f"{k:<12} {v['seconds']:>9.4f} {v['images_per_s']:>9.1f} {v['vs_forward']:>9.2f} "
                     f"{_gb(v['peak_bytes']):>8} {_gb(v['peak_delta_bytes']):>7}   {names.get(k, '')}")
    out = ["\n".join(lines), f"capture adds {100 * rec['capture_overhead']:.1f}% to the forward time"
               + (f", {100 * rec['capture_peak_memory_overhead']:.2f}% to its peak memory"
                  if "capture_peak_memory_overhead" in rec else "")]
    if "paper" in rec:
        est = (f" (ESTIMATED: block 0 timed, per-block part x {rec['layers']})" if rec["paper"]["estimated"]
               else "")
        out.append(f"speed of forward + capture: {rec['speedup_vs_paper']:.1f}x the paper's protocol{est}, "
                   f"{rec['speedup_vs_naive_hooks']:.2f}x naive hooks")
    r = rec["reductions"]
    out += [f"paper's protocol would hold {rec['paper_host_bytes'] / 1e9:.2f} GB on the host for this batch "
            f"(every component output of every block, both halves, {precision(rec)})",
            f"reductions: {r['tensors']} distinct tensors of block 0, {r['bytes'] / 1e6:.1f} MB in "
            f"{1e3 * r['seconds']:.2f} ms = {r['GBps']:.1f} GB/s (backend {rec['kernels_backend']}); "
            f"x {rec['layers']} layers = {1e3 * r['per_forward_s']:.1f} ms per forward "
            f"({100 * rec['reductions_share_of_forward']:.1f}% of the forward)",
            f"memory: {rec['memory_method']}"]
    if "layer_times" in rec:
        lt = rec["layer_times"]
        comps = list(lt["forward"]["per_component"])
        head = f"{'layer':<6} {'fwd ms':>8} {'+cap ms':>8} " + " ".join(f"{c:>7}" for c in comps)
        rows = [head + "   (component ms: forward / with capture)"]
        for lay, t in lt["forward"]["per_layer"].items():
            tc = lt["capture"]["per_layer"].get(lay)
            cells = " ".join(f"{1e3 * lt['forward']['per_component'][c].get(lay, 0):>7.2f}" for c in comps)
            rows.append(f"{lay:<6} {1e3 * t:>8.2f} {1e3 * tc if tc else 0:>8.2f} {cells}")
        fwdc, capc = (" ".join(f"{1e3 * sum(lt[kind]['per_component'][c].values()):>7.2f}" for c in comps)
                      for kind in ("forward", "capture"))
        rows += [f"{'total':<6} {1e3 * sum(lt['forward']['per_layer'].values()):>8.2f} "
                 f"{1e3 * sum(lt['capture']['per_layer'].values()):>8.2f} {fwdc}",
                 f"{'':<6} {'':>8} {'':>8} {capc}   (with capture)"]
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
    ax.set(xlabel="layer", ylabel="ms per batch")
    ax.set_title(f"{rec['model']} batch {rec['batch_size']} {precision(rec)} on {rec['device']}", fontsize=9)
    legend_outside(ax)
    save(fig, path, dpi=120)
