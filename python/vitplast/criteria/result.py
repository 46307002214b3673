"""``CriterionResult``: one criterion's scores per (component, layer) unit, and their reports.

Written as ``NAME.json`` beside ``run.json``, in the shape of ``plasticity.json``: ``format``,
``criterion``, ``meta``, ``layers``, per component its per-layer scores (``per_layer``, null where the
criterion is not defined), ``overall`` (the mean over layers; ``size``: the sum), per-seed per-layer
scores for loss-based criteria (``per_seed``), extra per-layer values (``extra``, e.g. fisher's sum),
then ``ranking`` (highest = finetune first) and ``cost``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping

import numpy as np

from vitplast_kernels.atomic_io import atomic_write, atomic_write_csv

from .cost import Cost

FORMAT = "vitplast-criterion/1"


def _clean(xs) -> list:
    return [float(x) if math.isfinite(x) else None for x in np.asarray(xs, dtype=np.float64).tolist()]


def _array(rows) -> np.ndarray:
    return np.array([[math.nan if v is None else v for v in r] for r in rows], dtype=np.float64)


@dataclasses.dataclass
class CriterionResult:
    """Scores of ``criterion``: ``values`` ``(C, L)`` float64 (NaN: not defined), ``per_seed``
    ``{seed: (C, L)}`` (loss-based criteria), ``extra`` ``{name: (C, L)}``, ``layer_reduce`` (how
    `overall` is made), ``cost`` and ``meta``."""

    criterion: str
    components: tuple[str, ...]
    layers: tuple[str, ...]
    values: np.ndarray
    per_seed: dict | None = None
    extra: dict = dataclasses.field(default_factory=dict)
    layer_reduce: str = "mean"
    cost: Cost = dataclasses.field(default_factory=Cost)
    meta: dict = dataclasses.field(default_factory=dict)

    def per_layer(self, component: str) -> np.ndarray:
        """``(L,)`` float64 scores of ``component`` (NaN: not defined)."""
        return self.values[self.components.index(component)]

    def overall(self, component: str) -> float:
        """The component's score: mean (``size``: sum) over its layers where defined; NaN when none is."""
        v = self.per_layer(component)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return math.nan
        return float(v.sum() if self.layer_reduce == "sum" else v.mean())

    def ranking(self) -> list[tuple[str, float]]:
        """``[(component, score)]``, highest first, undefined last."""
        vals = [(c, self.overall(c)) for c in self.components]
        return sorted(vals, key=lambda cv: (not math.isfinite(cv[1]), -cv[1] if math.isfinite(cv[1]) else 0))

    def to_dict(self) -> dict:
        out: dict = {"format": FORMAT, "criterion": self.criterion, "meta": self.meta,
                     "layers": list(self.layers), "layer_reduce": self.layer_reduce, "components": {}}
        for i, c in enumerate(self.components):
            overall = self.overall(c)
            entry = {"per_layer": _clean(self.values[i]),
                     "overall": overall if math.isfinite(overall) else None}
            if self.per_seed is not None:
                entry["per_seed"] = {str(s): _clean(v[i]) for s, v in self.per_seed.items()}
            if self.extra:
                entry["extra"] = {k: _clean(v[i]) for k, v in self.extra.items()}
            out["components"][c] = entry
        out["ranking"] = [[c, v if math.isfinite(v) else None] for c, v in self.ranking()]
        out["cost"] = self.cost.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> CriterionResult:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a criterion result (format {d.get('format')!r}, expected {FORMAT!r})")
        comps = list(d["components"])
        entries = [d["components"][c] for c in comps]
        first = entries[0] if entries else {}
        per_seed = None
        if "per_seed" in first:
            per_seed = {int(s): _array([e["per_seed"][s] for e in entries]) for s in first["per_seed"]}
        extra = {k: _array([e["extra"][k] for e in entries]) for k in first.get("extra", {})}
        values = _array([e["per_layer"] for e in entries])
        return cls(d["criterion"], tuple(comps), tuple(d["layers"]), values, per_seed, extra,
                   d.get("layer_reduce", "mean"), Cost(**d.get("cost", {})), dict(d["meta"]))

    def to_json(self, path: str | os.PathLike) -> None:
        text = json.dumps(self.to_dict(), indent=1)
        atomic_write(path, lambda tmp: open(tmp, "w").write(text))  # noqa: SIM115

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> CriterionResult:
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def records(self) -> list[dict]:
        """One dict per (component, layer): ``component``, ``layer``, ``score`` (NaN: not defined), the
        per-seed scores (``seed_S``) and the extra values."""
        rows = []
        for i, c in enumerate(self.components):
            for l, layer in enumerate(self.layers):
                row = {"component": c, "layer": layer, "score": float(self.values[i, l])}
                for s, v in (self.per_seed or {}).items():
                    row[f"seed_{s}"] = float(v[i, l])
                for k, v in self.extra.items():
                    row[k] = float(v[i, l])
                rows.append(row)
        return rows

    def to_csv(self, path: str | os.PathLike) -> None:
        """`records` as CSV (an undefined value is an empty cell), atomically."""
        atomic_write_csv(path, self.records())

    def table(self) -> str:
        """Text: one row per layer, one column per component, the component scores and the ranking."""
        width = max(12, *(len(c) + 2 for c in self.components))
        head = f"{'layer':>6} " + "".join(f"{c:>{width}}" for c in self.components)
        lines = [f"criterion: {self.criterion} (higher = finetune first)", head, "-" * len(head)]
        for l, name in enumerate(self.layers):
            cells = [_fmt(self.values[i, l]) for i in range(len(self.components))]
            lines.append(f"{name:>6} " + "".join(f"{c:>{width}}" for c in cells))
        lines.append("-" * len(head))
        label = "sum" if self.layer_reduce == "sum" else "mean"
        lines.append(f"{label:>6} " + "".join(f"{_fmt(self.overall(c)):>{width}}" for c in self.components))
        if self.per_seed is not None:
            lines.append(f"per seed: {len(self.per_seed)} seeds ({', '.join(map(str, self.per_seed))}); "
                         "cells: mean over seeds")
        lines.append("ranking: " + " > ".join(f"{c} ({_fmt(v)})" for c, v in self.ranking()))
        mem = "n/a (CPU)" if self.cost.peak_memory is None else f"{self.cost.peak_memory / 2**20:.1f} MiB"
        lines.append(f"cost: {self.cost.seconds:.2f} s, {self.cost.forwards} forward and "
                     f"{self.cost.backwards} backward passes, peak memory {mem}")
        return "\n".join(lines)

    def plot(self, path: str | os.PathLike, *, kind: str = "bars") -> None:
        """``kind="bars"``: each component's score; ``"heatmap"``: layers x components (blank: not
        defined)."""
        from vitplast.outputs.plots import component_color, figure, save

        if kind == "heatmap":
            fig, axes = figure(1, 1, (1.2 * len(self.components) + 2.5, 0.35 * len(self.layers) + 2))
            ax = axes[0][0]
            im = ax.imshow(np.ma.masked_invalid(self.values.T), aspect="auto", cmap="viridis")
            ax.set_xticks(range(len(self.components)), self.components)
            ax.set_yticks(range(len(self.layers)), self.layers)
            ax.set_ylabel("layer")
            fig.colorbar(im, ax=ax, label=self.criterion)
        elif kind == "bars":
            fig, axes = figure(1, 1, (1.1 * len(self.components) + 3, 3.6))
            ax = axes[0][0]
            vals = [self.overall(c) for c in self.components]
            ax.bar(range(len(vals)), [v if math.isfinite(v) else 0.0 for v in vals],
                   color=[component_color(c) for c in self.components])
            ax.set_xticks(range(len(vals)), self.components)
            ax.set_ylabel(f"{self.criterion} ({'sum' if self.layer_reduce == 'sum' else 'mean'} over layers)")
        else:
            raise ValueError(f"kind must be 'bars' or 'heatmap', got {kind!r}")
        ax.set_title(f"{self.criterion}: higher = finetune first", fontsize=10)
        save(fig, path)


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
