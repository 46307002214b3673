"""Figures of a `PlasticityResult`, and the one colour of each component label.

- `component_color`: the fixed colour of a label (``MHA`` is the same red in every figure of the
  package and its applications; ``MHA@3`` takes its component's colour; any other label a colour of
  its own, the same in every run);
- `plot_result`: ``kind="curves"`` (per-layer mean rate with its 95% CI band, and a box plot per
  component of its per-layer means) or ``kind="heatmap"`` (layers x components, the mean rate in each
  cell, coloured on a scale centred at 1, the rate that keeps distances).

Drawn on a bare ``matplotlib.figure.Figure`` (no pyplot: the user's backend and figures stay untouched)
and written atomically; matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import math
import os
import zlib
from typing import Any

import torch

from ..atomic_io import atomic_write

PlasticityResult = Any  # a vitplast_kernels.PlasticityResult (result.py imports this module)

# non-smooth components in warm colours, LayerNorms in blues, baselines in greys and others
COMPONENT_COLORS = {
    "MHA": "#d62728", "FC1": "#ff7f0e", "FC2": "#8c564b",
    "LN1": "#1f77b4", "LN2": "#17becf",
    "head": "#7f7f7f", "other": "#c7c7c7",
    "full": "#2ca02c", "lora": "#9467bd", "auto": "#e377c2", "auto@layer": "#e377c2",
}
_SPARE = ("#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d",
          "#31a354", "#756bb1")
KINDS = ("curves", "heatmap")
MAX_ANNOTATED_CELLS = 400  # a heatmap with more cells is drawn without the values written in
MAX_LAYER_TICKS = 24  # more layers than this: every k-th layer is labelled, at a regular step
# the one style of every figure of the package and its commands (applied when a figure is made)
STYLE = {"axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6, "axes.spines.top": False,
         "axes.spines.right": False, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8,
         "ytick.labelsize": 8, "legend.fontsize": 8, "legend.frameon": False, "figure.titlesize": 10}


def component_color(label: str) -> str:
    """The fixed colour (``#rrggbb``) of a component label: its own, its component's for ``LABEL@LAYERS``,
    else one drawn from the crc32 of the label (the same in every process)."""
    if label in COMPONENT_COLORS:
        return COMPONENT_COLORS[label]
    base = label.split("@", 1)[0]
    if base in COMPONENT_COLORS and "+" not in label:
        return COMPONENT_COLORS[base]
    return _SPARE[zlib.crc32(label.encode()) % len(_SPARE)]


def _title(result: PlasticityResult, what: str, title: str | None) -> str:
    """``title``, else ``what`` above a line naming the model, protocol and pairs."""
    if title:
        return title
    meta = ", ".join(f"{k}={result.meta[k]}" for k in ("model", "protocol", "pairs") if k in result.meta)
    return f"{what}\n{meta}" if meta else what


def new_figure(size: tuple[float, float], nrows: int = 1, ncols: int = 1, **subplots_kw):
    """``(fig, axes)``: a bare Figure on its own Agg canvas (no pyplot) with an ``nrows x ncols`` array of
    axes made in the package's one `STYLE`; the importer's rcParams are left as they were."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=size)
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False, **subplots_kw)
    return fig, axes


def legend_outside(ax, handles=None, labels=None, **kwargs):
    """A legend to the right of ``ax``, outside the data (nothing it covers), in the one style."""
    args = () if handles is None else (handles, labels if labels is not None else
                                       [h.get_label() for h in handles])
    kwargs = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0,
              "fontsize": STYLE["legend.fontsize"], "frameon": False, **kwargs}
    return ax.legend(*args, **kwargs)


def log_axis(ax, axis: str = "y") -> None:
    """A log scale on ``axis`` whose ticks stay readable on a narrow range: 1-2-5 steps labelled in
    plain numbers, so a range of less than a decade still shows several labelled ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    which = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    which.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    which.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))
    which.set_minor_formatter(NullFormatter())


def layer_ticks(ax, labels, axis: str = "x", *, max_ticks: int = MAX_LAYER_TICKS) -> None:
    """Tick positions ``0..L-1`` labelled with the layer labels: every layer up to ``max_ticks``
    layers, else every k-th at a regular step (the last layer's label is never squeezed in between)."""
    step = max(1, math.ceil(len(labels) / max_ticks))
    positions = list(range(0, len(labels), step))
    (ax.set_xticks if axis == "x" else ax.set_yticks)(positions, [str(labels[i]) for i in positions])


def _curves(result: PlasticityResult, title: str | None):
    fig, axes = new_figure((12, 4), 1, 2, gridspec_kw={"width_ratios": [3, 2]})
    ax1, ax2 = axes[0]
    x = list(range(result.n_layers))
    boxes = []
    for c in result.components:
        m, ci = result.mean(c).numpy(), result.ci(c).numpy()
        color = component_color(c)
        ax1.plot(x, m, marker="o", ms=3, color=color, label=c)
        ax1.fill_between(x, ci[:, 0], ci[:, 1], color=color, alpha=0.2)
        boxes.append(m[torch.isfinite(result.mean(c)).numpy()])
    layer_ticks(ax1, result.layers)
    ax1.set_xlabel("layer")
    ax1.set_ylabel("plasticity (mean rate, 95% CI band)")
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    legend_outside(ax1)
    parts = ax2.boxplot(boxes, tick_labels=list(result.components), patch_artist=True,
                        medianprops={"color": "black"})
    for box, c in zip(parts["boxes"], result.components, strict=True):
        box.set(facecolor=component_color(c), alpha=0.45)
    ax2.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax2.set_ylabel("per-layer plasticity")
    fig.suptitle(_title(result, "Plasticity per component", title), fontsize=10)
    return fig


def _heatmap(result: PlasticityResult, title: str | None):
    from matplotlib.colors import TwoSlopeNorm

    values = torch.stack([result.mean(c) for c in result.components], dim=1).numpy()  # (L, C)
    finite = values[~torch.isnan(torch.from_numpy(values)).numpy()]
    low = min(float(finite.min()) if finite.size else 1.0, 0.999)
    high = max(float(finite.max()) if finite.size else 1.0, 1.001)
    n_layers, n_comps = values.shape
    fig, axes = new_figure((max(5.0, 1.0 * n_comps + 2.8), max(3.4, 0.34 * n_layers + 1.9)))
    ax = axes[0, 0]
    ax.grid(False)
    image = ax.imshow(values, cmap="RdBu_r", norm=TwoSlopeNorm(vmin=low, vcenter=1.0, vmax=high),
                      aspect="auto", interpolation="nearest")
    ax.set_xticks(range(n_comps), result.components)
    for tick, c in zip(ax.get_xticklabels(), result.components, strict=True):
        tick.set_color(component_color(c))
        tick.set_fontweight("bold")
    layer_ticks(ax, result.layers, axis="y", max_ticks=32)
    ax.set_ylabel("layer")
    if values.size <= MAX_ANNOTATED_CELLS:
        spread = max(high - 1.0, 1.0 - low)
        for li in range(n_layers):
            for ci in range(n_comps):
                v = float(values[li, ci])
                dark = math.isfinite(v) and abs(v - 1.0) > 0.6 * spread  # white text on the deep colours
                ax.text(ci, li, f"{v:.2f}" if math.isfinite(v) else "n/a", ha="center", va="center",
                        fontsize=9, color="white" if dark else "black")
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("mean rate (1 = distances kept)")
    ax.set_title(_title(result, "Plasticity per layer and component", title), fontsize=10)
    return fig


def plot_result(result: PlasticityResult, path: str | os.PathLike, *, kind: str = "curves",
                title: str | None = None) -> None:
    """Saves the ``kind`` figure of ``result`` to ``path`` (format from the suffix), atomically."""
    fig = draw_result(result, kind=kind, title=title)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120))


def draw_result(result: PlasticityResult, *, kind: str = "curves", title: str | None = None):
    """The ``kind`` figure of ``result`` as a laid-out ``matplotlib.figure.Figure`` (not saved)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    fig = _curves(result, title) if kind == "curves" else _heatmap(result, title)
    fig.tight_layout()
    return fig
