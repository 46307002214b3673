"""The one plotting style of the commands: a bare ``matplotlib.figure.Figure`` on its own Agg canvas,
saved atomically, and one colour per component label (`component_color`: ``MHA`` is the same red
in every figure of every command and of ``PlasticityResult.plot``). No pyplot and no
``matplotlib.use``: the importer's backend, rcParams and open figures stay untouched, and nothing needs
closing (the figure is freed with its last reference).

Usage:
    fig, axes = figure(1, 2, (12, 4))        # axes: a 2-D array, like plt.subplots(squeeze=False)
    axes[0, 0].plot(steps, values, color=component_color("MHA"), label="MHA")
    save(fig, "out/curves.png")              # tight layout, PNG (or the suffix's format), atomic
"""

from __future__ import annotations

import os
from pathlib import Path

from vitplast_kernels.atomic_io import atomic_write
from vitplast_kernels.measure.figures import (
    COMPONENT_COLORS,
    component_color,
    layer_ticks,
    legend_outside,
    log_axis,
    new_figure,
)

__all__ = ["COMPONENT_COLORS", "DPI", "component_color", "figure", "layer_ticks", "legend_outside",
           "log_axis", "save"]

DPI = 110


def figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (6.4, 4.8), **subplots_kw):
    """``(fig, axes)``: a new Figure with the Agg canvas and an ``nrows x ncols`` array of axes, in the
    one style of every figure (``vitplast_kernels.measure.figures.STYLE``)."""
    return new_figure(size, nrows, ncols, **subplots_kw)


def save(fig, path: str | os.PathLike, *, dpi: int = DPI, tight: bool = True) -> Path:
    """Writes ``fig`` to ``path`` atomically (temporary file + rename); returns the path."""
    path = Path(path)
    if tight:
        fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi))
    return path
