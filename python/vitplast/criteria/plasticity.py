"""``plasticity``: the package's own criterion, the mean pair rate of each unit, and its file
(``plasticity.json``: the kernels' ``PlasticityResult`` with its raw sums, a format and a checksum)."""

from __future__ import annotations

import math
import os

import numpy as np

from vitplast_kernels import PlasticityResult

from ..outputs.result_files import ResultFileError, checked_number, field, read_result_json, write_result_json
from .base import Cost, Criterion, Setting, Units, unit_grid
from .loop import measure_plasticity
from .result import CriterionResult

KIND, VERSION = "vitplast-plasticity", 1
# of a result's meta, what plasticity.json keeps besides the measurement's own
SAVED_META = ("cache_key", "batches", "bad_images")
# keywords of the measuring loop a caller may set in the setting's options (not part of the cache key)
LOOP_OPTIONS = ("limit", "chunks", "desc", "on_error", "make_capture")
# the statistics that count pairs
COUNTS = ("count", "identical", "nonfinite")


class Plasticity(Criterion):
    """``P(u) = mean over distinct pairs (x, y) of ‖u(x) − u(y)‖_F / ‖x − y‖_F`` (DESIGN.md), with either
    protocol: ``in_situ`` (each unit sees its real input) or ``decomposition`` (every unit applied to the
    embedding output, the paper's). Pairs from the setting's ``pair_batches`` (``halves`` or ``all``),
    measured through the one measuring loop (`vitplast.criteria.loop.measure_plasticity`). Odonnat, Chapel,
    Tavenard & Redko, *Vision Transformer Finetuning Benefits from Non-Smooth Components*, 2026. Forward only.
    Extra value: ``pairs`` (pairs used per unit). The kernels' ``PlasticityResult`` (sums, intervals; per
    chunk with the option ``chunks``) is the result's ``measurement``.
    """

    name = "plasticity"
    needs = frozenset({"pairs"})

    def options(self, setting: Setting) -> dict:
        o = setting.options
        return {"protocol": o.get("protocol", "in_situ"), "pairs": o.get("pairs", "halves"),
                "embedding": o.get("embedding")}

    def score_units(self, net, units: Units, setting: Setting, cost: Cost):
        if setting.pair_batches is None:
            raise ValueError("plasticity: the setting has no paired images (pair_batches)")
        loop = {k: setting.options[k] for k in LOOP_OPTIONS if setting.options.get(k) is not None}
        if "make_capture" not in loop:
            loop.update(self.options(setting), components=setting.components)
        measured = measure_plasticity(net.eval(), setting.pair_batches(), amp=setting.amp,
                                      progress=setting.progress, **loop)
        cost.forwards += measured.steps
        if measured.result is None:
            raise ValueError("plasticity: no batch was measured")
        self._measurement = measured.result
        return scores_of(measured.result, units)

    def score(self, setting: Setting) -> CriterionResult:
        result = super().score(setting)
        result.measurement = self._measurement
        return result

    def write(self, result: CriterionResult, path: str | os.PathLike) -> str:
        """``plasticity.json``: the measurement's raw sums and derived values, its meta with the
        result's cache key; returns the checksum."""
        payload = result.measurement.to_dict()
        payload["meta"] = {**payload["meta"], **{k: result.meta[k] for k in SAVED_META if k in result.meta}}
        return write_result_json(path, payload, kind=KIND, version=VERSION)

    def read(self, path: str | os.PathLike) -> CriterionResult:
        """The result saved in ``plasticity.json``: its checksum and its measurement
        (`measurement_from_doc`) checked; `ResultFileError` naming the file and the field otherwise."""
        doc, _ = read_result_json(path, kind=KIND, versions=(VERSION,))
        measured = measurement_from_doc(doc, path)
        units = Units(tuple(measured.components), tuple(measured.layers), {})
        values, extra = scores_of(measured, units)
        return CriterionResult(self.name, units.components, units.layers, values, extra=extra,
                               meta=dict(field(doc, "meta", path, dict)), measurement=measured,
                               checksum=doc["checksum"])


def measurement_from_doc(doc, path: str | os.PathLike) -> PlasticityResult:
    """The kernels' ``PlasticityResult`` a ``plasticity.json`` holds (``vitplast measure``'s, or one the
    kernels' ``PlasticityResult.to_json`` wrote), checked: one row of ``stat_fields`` per layer for every
    component, sums a measurement can give (`check_statistics`), and the values derived from them
    (``n_pairs``, ``mean``, ``overall``) the ones the sums give; `ResultFileError` naming ``path`` and the
    field otherwise. The one reader of a measurement's content: ``vitplast compare`` reads through it too."""
    layers = field(doc, "layers", path, list)
    fields = field(doc, "stat_fields", path, list)
    comps = field(doc, "components", path, dict)
    if not layers or not comps:
        raise ResultFileError(path, "components" if layers else "layers", "is empty")
    for c, entry in comps.items():
        sums = field(entry, "sums", path, list, f"components.{c}")
        if len(sums) != len(layers) or any(not isinstance(r, list) or len(r) != len(fields)
                                           for r in sums):
            raise ResultFileError(path, f"components.{c}.sums", f"is not {len(layers)} rows (one per layer "
                                  f"of 'layers') of {len(fields)} statistics ({', '.join(map(str, fields))})")
        check_statistics(np.array(sums, dtype=object), fields, path, f"components.{c}.sums")
    try:
        measured = PlasticityResult.from_dict(doc)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:  # the per-head sums
        raise ResultFileError(path, "heads", f"not the per-head sums of a measurement ({exc})") from None
    for c, entry in comps.items():
        _agrees(entry, "n_pairs", measured.n_pairs(c).tolist(), path, c)
        _agrees(entry, "mean", measured.mean(c).tolist(), path, c)
        _agrees(entry, "overall", [measured.overall(c)], path, c, scalar=True)
    return measured


def scores_of(measured, units: Units) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(values, {"pairs": ...})`` of a ``PlasticityResult``: each unit's mean rate, pairs used."""
    values, pairs = unit_grid(units), unit_grid(units)
    for i, c in enumerate(units.components):
        values[i] = measured.mean(c).numpy()
        pairs[i] = measured.n_pairs(c).numpy().astype(np.float64)
    return values, {"pairs": pairs}


def check_statistics(sums: np.ndarray, fields, path: str | os.PathLike, name: str) -> None:
    """`ResultFileError` naming ``path`` and ``name`` unless ``sums`` (last axis: ``fields``) are what a
    measurement can give: every statistic a finite number, the counts (``count``, ``identical``,
    ``nonfinite``) whole numbers >= 0, and per row the sums of ``count`` non-negative rates: ``sum`` and
    ``sumsq`` >= 0, both 0 without pairs, ``count * sumsq >= sum**2``."""
    flat = sums.reshape(-1, len(fields))
    for f, column in zip(fields, flat.T, strict=True):
        whole = f in COUNTS
        for i, v in enumerate(column):
            v = checked_number(v, path, f"{name}: {f} #{i}", lo=0.0 if whole else -math.inf)
            if whole and v != round(v):
                raise ResultFileError(path, f"{name}: {f} #{i}", f"{v!r} is not a count (a whole number)")
    if not {"count", "sum", "sumsq"} <= set(fields):
        return
    at = {f: fields.index(f) for f in ("count", "sum", "sumsq")}
    for i, row in enumerate(flat):
        n, s1, s2 = (float(row[at[f]]) for f in ("count", "sum", "sumsq"))
        if s1 < 0 or s2 < 0 or (n == 0 and (s1 or s2)) or n * s2 < s1 * s1 * (1 - 1e-9) - 1e-12:
            raise ResultFileError(path, f"{name}[{i}]", f"sums impossible for {n:g} non-negative rates "
                                  f"(sum {s1!r}, sum of squares {s2!r})")


def _agrees(entry, key: str, made: list, path, component: str, *, scalar: bool = False) -> None:
    """`ResultFileError` unless the saved derived value ``key`` equals the one the sums give."""
    saved = field(entry, key, path, where=f"components.{component}")
    saved = [saved] if scalar else saved
    name = f"components.{component}.{key}"
    if not isinstance(saved, list) or len(saved) != len(made):
        raise ResultFileError(path, name, f"holds {saved!r}, not {len(made)} values")
    for s, m in zip(saved, made, strict=True):
        s = checked_number(s, path, name, nullable=True)
        if math.isfinite(s) != math.isfinite(m) or (math.isfinite(m)
                                                    and not math.isclose(s, m, rel_tol=1e-9)):
            raise ResultFileError(path, name, f"{s!r} is not what the sums give ({m!r})")
