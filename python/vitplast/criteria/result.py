"""``CriterionResult``: one criterion's scores per (component, layer) unit, and their reports.

Written as ``NAME.json`` beside ``run.json``, in the shape of ``plasticity.json``: ``format``, ``criterion``,
``meta``, ``layers``, per component its per-layer scores (``per_layer``, null where the criterion is not
defined), ``overall`` (the mean over layers; ``size``: the sum), per-seed per-layer scores for loss-based
criteria (``per_seed``), extra per-layer values (``extra``, e.g. fisher's sum), then ``ranking`` (highest =
finetune first) and ``cost``: what scoring cost (`Cost`), reported by every criterion beside its scores.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from vitplast.outputs.plots import component_color, figure, save
from vitplast_kernels.atomic_io import atomic_write_csv

from ..outputs.result_files import (
    ResultFileError,
    checked_number,
    count,
    field,
    read_result_json,
    write_result_json,
)

KIND, VERSION = "vitplast-criterion", 1
FORMAT = f"{KIND}/{VERSION}"


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _clean(xs) -> list:
    return [_finite(x) for x in np.asarray(xs, dtype=np.float64).tolist()]


@dataclasses.dataclass
class Cost:
    """What scoring cost: wall ``seconds``, ``forwards`` and ``backwards`` (passes over a batch, or over
    one sample under ``vmap``, as counted by the criterion), ``peak_memory`` (bytes of device memory at
    the peak, CUDA only; None on the CPU)."""

    seconds: float = 0.0
    forwards: int = 0
    backwards: int = 0
    peak_memory: int | None = None


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
    # not written: the measurement behind the scores (plasticity: the kernels' PlasticityResult, its sums
    # and intervals), and the checksum of the file the result was read from
    measurement: Any = dataclasses.field(default=None, repr=False, compare=False)
    checksum: str | None = dataclasses.field(default=None, repr=False, compare=False)

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
            entry = {"per_layer": _clean(self.values[i]), "overall": _finite(self.overall(c))}
            if self.per_seed is not None:
                entry["per_seed"] = {str(s): _clean(v[i]) for s, v in self.per_seed.items()}
            if self.extra:
                entry["extra"] = {k: _clean(v[i]) for k, v in self.extra.items()}
            out["components"][c] = entry
        out["ranking"] = [[c, _finite(v)] for c, v in self.ranking()]
        out["cost"] = dataclasses.asdict(self.cost)
        return out

    @classmethod
    def from_dict(cls, d: Mapping, path: str | os.PathLike = "<dict>") -> CriterionResult:
        """The result ``d`` holds, checked: every component holds one value (finite or null) per
        layer, per seed and per extra value alike, its per-layer scores the mean of its per-seed ones,
        its ``overall`` the one its layers make, the cost's counts >= 0; `ResultFileError` naming
        ``path`` and the field otherwise."""
        layers = field(d, "layers", path, list)
        if not layers or not all(isinstance(x, str) for x in layers):
            raise ResultFileError(path, "layers", "must be a non-empty list of layer names")
        reduce = field(d, "layer_reduce", path, str)
        if reduce not in ("mean", "sum"):
            raise ResultFileError(path, "layer_reduce", f"{reduce!r} is neither 'mean' nor 'sum'")
        comps = field(d, "components", path, dict)
        if not comps:
            raise ResultFileError(path, "components", "holds no component")
        first = next(iter(comps.values()))
        # the per-seed scores and the extra values by name, in the file's order
        rows = {g: {k: [] for k in (first.get(g, {}) if isinstance(first, Mapping) else [])}
                for g in ("per_seed", "extra")}
        values = []
        for c, entry in comps.items():
            where = f"components.{c}"
            values.append(_row(entry, "per_layer", len(layers), path, where))
            for g, named in rows.items():
                for k, got in named.items():
                    got.append(_row(field(entry, g, path, dict, where), k, len(layers), path, f"{where}.{g}"))
        cost = field(d, "cost", path, dict)
        peak = cost.get("peak_memory")
        out = cls(field(d, "criterion", path, str), tuple(comps), tuple(layers), np.array(values),
                  {int(s): np.array(v) for s, v in rows["per_seed"].items()} if "per_seed" in first else None,
                  {k: np.array(v) for k, v in rows["extra"].items()}, reduce,
                  Cost(checked_number(field(cost, "seconds", path, (int, float), "cost"), path,
                                      "cost.seconds", lo=0),
                       *(count(field(cost, k, path, int, "cost"), path, f"cost.{k}")
                         for k in ("forwards", "backwards")),
                       None if peak is None else count(peak, path, "cost.peak_memory")),
                  dict(field(d, "meta", path, dict)))
        if out.per_seed:  # the scores are the mean over seeds, as `Criterion.score` makes them
            made = seed_mean(out.per_seed)
            for (i, li), saved in np.ndenumerate(out.values):
                if not _same(saved, made[i, li]):
                    raise ResultFileError(path, f"components.{out.components[i]}.per_layer[{li}]",
                                          f"{_num(saved)} is not the mean of its per-seed scores "
                                          f"({_num(made[i, li])})")
        for c, entry in comps.items():
            saved, made = field(entry, "overall", path, where=f"components.{c}"), out.overall(c)
            saved = checked_number(saved, path, f"components.{c}.overall", nullable=True)
            if not _same(saved, made):
                raise ResultFileError(path, f"components.{c}.overall",
                                      f"{saved!r} is not the {reduce} of its per-layer scores ({made!r})")
        return out

    def to_json(self, path: str | os.PathLike) -> str:
        """Writes `to_dict` with its format and checksum (`vitplast.outputs.result_files`); returns the
        checksum."""
        return write_result_json(path, self.to_dict(), kind=KIND, version=VERSION)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> CriterionResult:
        """The result saved at ``path``, its checksum, schema and ranges checked (`from_dict`);
        `ResultFileError` naming the file and the field otherwise."""
        doc, _ = read_result_json(path, kind=KIND, versions=(VERSION,))
        result = cls.from_dict(doc, path)
        result.checksum = doc["checksum"]
        return result

    def expect_units(self, components, layers, path: str | os.PathLike) -> None:
        """`ResultFileError` naming ``path`` unless the result holds exactly ``components`` and
        ``layers`` (the units of the model it would stand for)."""
        for name, got, want in (("components", self.components, tuple(components)),
                                ("layers", self.layers, tuple(layers))):
            if tuple(got) != want:
                missing = [x for x in want if x not in got]
                what = f"lacks {', '.join(missing)}" if missing else f"holds {', '.join(got)}"
                raise ResultFileError(path, name, f"{what}; the model's are {', '.join(want)}")

    def expect_range(self, lo: float, hi: float, path: str | os.PathLike, *, whole: bool = False) -> None:
        """`ResultFileError` naming ``path`` and the value unless every defined score (per layer and per
        seed) lies in ``[lo, hi]`` (and is a whole number when ``whole``): what the criterion can give."""
        seeds = (self.per_seed or {}).items()
        arrays = [("per_layer", self.values), *((f"per_seed.{s}", v) for s, v in seeds)]
        for name, values in arrays:
            for (i, li), v in np.ndenumerate(values):
                if math.isfinite(v) and (not lo <= v <= hi or (whole and v != round(v))):
                    what = "a whole number " if whole else ""
                    raise ResultFileError(path, f"components.{self.components[i]}.{name}[{li}]",
                                          f"{float(v)!r} is not {what}in [{lo:g}, {hi:g}], the range of "
                                          f"{self.criterion}")

    def records(self) -> list[dict]:
        """One dict per (component, layer): ``component``, ``layer``, ``score`` (NaN: not defined), the
        per-seed scores (``seed_S``) and the extra values."""
        return [{"component": c, "layer": layer, "score": float(self.values[i, l]),
                 **{f"seed_{s}": float(v[i, l]) for s, v in (self.per_seed or {}).items()},
                 **{k: float(v[i, l]) for k, v in self.extra.items()}}
                for i, c in enumerate(self.components) for l, layer in enumerate(self.layers)]

    def to_dataframe(self):
        """`records` as a pandas ``DataFrame`` (component, layer, score, then the per-seed and extra
        values)."""
        import pandas as pd  # optional dependency, loaded when a frame is asked for

        return pd.DataFrame(self.records())

    def to_csv(self, path: str | os.PathLike) -> None:
        """`records` as CSV (an undefined value is an empty cell), atomically."""
        atomic_write_csv(path, self.records())

    def table(self) -> str:
        """Text: one row per layer, one column per component, the component scores and the ranking."""
        width = max(12, *(len(c) + 2 for c in self.components))
        head = f"{'layer':>6} " + "".join(f"{c:>{width}}" for c in self.components)
        lines = [f"criterion: {self.criterion} (higher = finetune first)", head, "-" * len(head)]
        lines += [f"{name:>6} " + "".join(f"{_fmt(v):>{width}}" for v in self.values[:, l])
                  for l, name in enumerate(self.layers)]
        overall = "".join(f"{_fmt(self.overall(c)):>{width}}" for c in self.components)
        lines += ["-" * len(head), f"{self.layer_reduce:>6} {overall}"]
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
        if kind not in ("bars", "heatmap"):
            raise ValueError(f"kind must be 'bars' or 'heatmap', got {kind!r}")
        heatmap = kind == "heatmap"
        fig, axes = figure(1, 1, (1.2 * len(self.components) + 2.5, 0.35 * len(self.layers) + 2) if heatmap
                           else (1.1 * len(self.components) + 3, 3.6))
        ax = axes[0][0]
        if heatmap:
            im = ax.imshow(np.ma.masked_invalid(self.values.T), aspect="auto", cmap="viridis")
            ax.set_xticks(range(len(self.components)), self.components)
            ax.set_yticks(range(len(self.layers)), self.layers)
            ax.set_ylabel("layer")
            fig.colorbar(im, ax=ax, label=self.criterion)
        else:
            vals = [self.overall(c) for c in self.components]
            ax.bar(range(len(vals)), [v if math.isfinite(v) else 0.0 for v in vals],
                   color=[component_color(c) for c in self.components])
            ax.set_xticks(range(len(vals)), self.components)
            ax.set_ylabel(f"{self.criterion} ({self.layer_reduce} over layers)")
        ax.set_title(f"{self.criterion}: higher = finetune first", fontsize=10)
        save(fig, path)


def _row(entry, key: str, n: int, path, where: str) -> list[float]:
    """The list ``entry[key]`` (``where``: the entry's place in the file) as ``n`` floats (null: NaN), each
    finite or null."""
    values, name = field(entry, key, path, list, where), f"{where}.{key}"
    if len(values) != n:
        raise ResultFileError(path, name, f"holds {len(values)} values for {n} layers")
    return [checked_number(v, path, f"{name}[{i}]", nullable=True) for i, v in enumerate(values)]


def seed_mean(per_seed: Mapping) -> np.ndarray:
    """The scores of a criterion scored per seed: the mean of ``per_seed``'s ``(C, L)`` arrays, in its
    order (NaN where a seed's score is)."""
    return np.mean(np.stack(list(per_seed.values())), axis=0)


def _same(saved: float, made: float) -> bool:
    """Whether a saved value is the one its parts make (both undefined, or equal to rounding)."""
    return math.isfinite(saved) == math.isfinite(made) and (
        not math.isfinite(made) or math.isclose(saved, made, rel_tol=1e-9, abs_tol=1e-12))


def _num(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else "null"


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
