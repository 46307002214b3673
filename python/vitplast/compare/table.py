"""What ``vitplast compare`` computes from the measurements: per component, each run's plasticity (mean
over layers, and per layer) with its 95% CI, and its difference from the first run (the reference).

- A layer's CI is the measurement's own (`vitplast_kernels.PlasticityResult.ci`: its standard
  error ``sem``).
- The mean over layers is the mean of the per-layer means; its standard error ``sqrt(sum sem_l^2) / L``
  treats the layers' estimates as independent.
- A difference ``B - A`` has standard error ``sqrt(sem_A^2 + sem_B^2)``: exact for measurements on
  independent pairs (two datasets), conservative (too wide) for two measurements of the same pairs
  (before and after finetuning on the same images), whose errors are positively correlated.

Intervals are normal ``+- 1.96 sem``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

from vitplast_kernels.measure.result import Z95

from .measurements import Measurement


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A mean, its standard error and 95% CI (NaN where undefined)."""

    mean: float
    sem: float

    @property
    def ci(self) -> tuple[float, float]:
        return self.mean - Z95 * self.sem, self.mean + Z95 * self.sem

    def minus(self, other: Estimate) -> Estimate:
        """``self - other`` for independent estimates."""
        return Estimate(self.mean - other.mean, math.hypot(self.sem, other.sem))

    def to_dict(self) -> dict:
        mean, sem, lo, hi = (x if math.isfinite(x) else None for x in (self.mean, self.sem, *self.ci))
        return {"mean": mean, "sem": sem, "ci": [lo, hi]}


NAN = Estimate(math.nan, math.nan)


def layer_estimates(m: Measurement, component: str) -> list[Estimate]:
    """The run's per-layer estimates of ``component`` (NaN where it was not measured)."""
    res = m.result
    if component not in res.components:
        return [NAN] * res.n_layers
    means, sems = res.mean(component).tolist(), res.sem(component).tolist()
    return [Estimate(a, b) for a, b in zip(means, sems, strict=True)]


def overall_estimate(layers: list[Estimate]) -> Estimate:
    """The mean over layers (those with a value) of the per-layer means, and its standard error."""
    kept = [e for e in layers if math.isfinite(e.mean)]
    if not kept:
        return NAN
    sem = (math.sqrt(sum(e.sem ** 2 for e in kept)) / len(kept) if all(math.isfinite(e.sem) for e in kept)
           else math.nan)
    return Estimate(sum(e.mean for e in kept) / len(kept), sem)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The compared runs, the components and layers compared, and each run's estimates:
    ``per_layer[c][r]`` (a list over layers) and ``overall[c][r]`` for run ``r`` and component ``c``."""

    runs: tuple[Measurement, ...]
    components: tuple[str, ...]
    layers: tuple[str, ...]
    per_layer: dict
    overall: dict

    @property
    def labels(self) -> list[str]:
        return [m.label for m in self.runs]

    def difference(self, component: str, run: int, layer: int | None = None) -> Estimate:
        """Run ``run`` minus the first run, for one layer or (``layer=None``) the mean over layers."""
        runs = self.overall[component] if layer is None else [r[layer] for r in self.per_layer[component]]
        return runs[run].minus(runs[0])

    def records(self) -> list[dict]:
        """One row per (run, component, layer), ``layer="mean"`` for the mean over layers: the run's
        mean, 95% CI and pairs, and the difference from the first run with its 95% CI."""
        rows = []
        for r, m in enumerate(self.runs):
            for c in self.components:
                pairs = m.result.n_pairs(c).tolist() if c in m.result.components else [0] * len(self.layers)
                for li, layer in [*enumerate(self.layers), (None, "mean")]:
                    est = self.overall[c][r] if li is None else self.per_layer[c][r][li]
                    diff = self.difference(c, r, li)
                    (lo, hi), (dlo, dhi) = est.ci, diff.ci
                    rows.append({"run": m.label, "component": c, "layer": layer, "mean": est.mean,
                                 "ci_low": lo, "ci_high": hi,
                                 "n_pairs": sum(pairs) if li is None else pairs[li],
                                 "diff": diff.mean, "diff_low": dlo, "diff_high": dhi})
        return rows

    def to_dict(self) -> dict:
        """JSON-ready: the runs (label, file, meta), and per component the overall and per-layer
        estimates of each run and their differences from the first."""
        comps = {c: {"overall": [e.to_dict() for e in self.overall[c]],
                     "overall_minus_first": [self.difference(c, r).to_dict() for r in range(len(self.runs))],
                     "per_layer": [[e.to_dict() for e in run] for run in self.per_layer[c]]}
                 for c in self.components}
        return {"format": "vitplast-compare/1", "reference": self.runs[0].label,
                "runs": [{"label": m.label, "path": str(m.path), "meta": m.result.meta} for m in self.runs],
                "layers": list(self.layers), "components": comps}


def compare_measurements(runs: list[Measurement], components: list[str] | None = None) -> Comparison:
    """The `Comparison` of ``runs`` (their first is the reference); ValueError when they do not
    have the same layers, or share no component."""
    layers = runs[0].result.layers
    for m in runs[1:]:
        if m.result.layers != layers:
            raise ValueError(f"RUN {m.label!r} has {m.result.n_layers} layers, {runs[0].label!r} "
                             f"{len(layers)}: compare measurements of the same model")
    models = {m.label: (m.result.meta or {}).get("model") for m in runs}
    if len({v for v in models.values() if v is not None}) > 1:
        named = ", ".join(f"{k}: {v}" for k, v in models.items())
        warnings.warn(f"the runs measured different models ({named}); their plasticities are compared as "
                      "they are", stacklevel=2)
    order = list(dict.fromkeys(c for m in runs for c in m.result.components))
    if components is not None:
        if unknown := [c for c in components if c not in order]:
            raise ValueError(f"--components: {', '.join(unknown)} measured by no run; measured: "
                             f"{', '.join(order)}")
        order = list(components)
    if not order:
        raise ValueError("the runs share no component to compare")
    per_layer = {c: [layer_estimates(m, c) for m in runs] for c in order}
    overall = {c: [overall_estimate(layers_) for layers_ in per_layer[c]] for c in order}
    return Comparison(tuple(runs), tuple(order), tuple(layers), per_layer, overall)


def _cell(e: Estimate, signed: bool = False) -> str:
    if not math.isfinite(e.mean):
        return "n/a"
    fmt = "+.3f" if signed else ".3f"
    lo, hi = e.ci
    if not math.isfinite(lo):
        return format(e.mean, fmt)
    return f"{format(e.mean, fmt)} [{format(lo, fmt)}, {format(hi, fmt)}]"


def _aligned(rows: list[list[str]], left: int) -> list[str]:
    """``rows`` (the first is the header) as lines: the first ``left`` columns left-aligned, the others
    right-aligned, every column as wide as its widest cell, two spaces between columns whatever the widths."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) if i < left else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]


def format_comparison(cmp: Comparison) -> str:
    """The comparison as text: per component the mean over layers of each run, then per layer, each
    with its 95% CI, and each run minus the first. Columns are as wide as their widest cell."""
    ref = cmp.labels[0]
    diffs = [f"{label} - {ref}" for label in cmp.labels[1:]]

    def cells(c: str, li: int | None = None) -> list[str]:
        """Each run's cell, then each run minus the first (``li`` None: the mean over layers)."""
        runs = cmp.overall[c] if li is None else [run[li] for run in cmp.per_layer[c]]
        diff = [_cell(cmp.difference(c, r, li), signed=True) for r in range(1, len(runs))]
        return [*map(_cell, runs), *diff]

    table = _aligned([["component", *cmp.labels, *diffs], *([c, *cells(c)] for c in cmp.components)], 1)
    layers = [[c, str(layer), *cells(c, li)] for c in cmp.components for li, layer in enumerate(cmp.layers)]
    lines = [f"plasticity, mean over {len(cmp.layers)} layers [95% CI]; differences against {ref!r}",
             table[0], "-" * max(len(line) for line in table), *table[1:],
             "", "per layer [95% CI]:", *_aligned([["component", "layer", *cmp.labels, *diffs], *layers], 1),
             "(differences: 95% CI for independent pairs, conservative when the runs measured the same "
             "pairs)", ""]
    ranked = zip(cmp.labels, ranks(cmp), strict=True)
    return "\n".join([*lines, *(f"ranking {label}: {' > '.join(order)}" for label, order in ranked)])


def ranks(cmp: Comparison) -> list[list[str]]:
    """Per run, its components from the most to the least plastic (mean over layers)."""
    means = [{c: cmp.overall[c][r].mean for c in cmp.components} for r in range(len(cmp.runs))]
    return [sorted((c for c in m if math.isfinite(m[c])), key=lambda c, m=m: -m[c]) for m in means]
