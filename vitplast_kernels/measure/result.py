"""``PlasticityResult``: per component and layer statistics of the pair rates, and their reports.

What is stored are *sums*, exactly combinable across batches and ranks: per component ``c`` and
layer ``l``, float64 ``[count, sum, sumsq, identical, nonfinite]`` (see
`vitplast_kernels.measure.pairings.fields.STAT_FIELDS`): pairs used, sum and sum of squares of their
rates, pairs excluded because their input distance is 0, pairs with a non-finite value (never averaged in).
The sums stay on the device they were computed on until a value is asked for.

Derived values (float64 CPU tensors, NaN where undefined):

- ``mean = sum / count``;
- ``std`` = sample standard deviation (``count - 1`` in the denominator);
- 95% CI: normal approximation ``mean +- 1.96 * sem``, ``sem`` (standard error of the mean) =
  ``std / sqrt(count)`` for disjoint pairs (``halves``). With ``pairs="all"`` the pairs of a batch
  share sequences and are not independent: the stats carry a sixth field ``var_w`` (jackknife over
  sequences of each batch's U-statistic, see `vitplast_kernels.measure.pairings.all_pairs`) and
  ``sem = sqrt(var_w) / count``.

Reports: `PlasticityResult.table` (text), `to_json` (the sums, exact),
`records`, `to_dataframe` (pandas, optional) and
`to_csv` (one row per component and layer), `plot`
(curves or a heatmap, `.figures`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence

import torch

from ..atomic_io import atomic_write, atomic_write_csv
from .distributed import all_reduce_sums
from .pairings.fields import STAT_FIELDS, U_STAT_FIELDS

Z95 = 1.959963984540054


def _finite_or_none(xs: Sequence[float]) -> list[float | None]:
    return [x if math.isfinite(x) else None for x in xs]


class PlasticityResult:
    """Statistics of the pair rates ``||f(x) - f(y)|| / ||x - y||`` per component and layer.

    Args:
        stats: ``(C, L, 5)`` float64 sums (any device), component-major.
        components: the ``C`` component labels, in report order.
        layers: the ``L`` layer labels, in block order.
        heads: optional ``(L, H, 5)`` float64 sums of the per-head MHA rates (``per_head=True``).
        meta: JSON-serialisable facts about the measurement (protocol, pairs, tokens, model, ...).
    """

    def __init__(
        self,
        stats: torch.Tensor,
        components: Sequence[str],
        layers: Sequence[str],
        *,
        heads: torch.Tensor | None = None,
        meta: Mapping | None = None,
    ) -> None:
        components, layers = tuple(components), tuple(str(x) for x in layers)
        fields = {len(STAT_FIELDS): STAT_FIELDS, len(U_STAT_FIELDS): U_STAT_FIELDS}
        if (stats.dim() != 3 or stats.shape[:2] != (len(components), len(layers))
                or stats.shape[2] not in fields):
            raise ValueError(
                f"stats must have shape (C, L, 5) = ({len(components)}, {len(layers)}, 5) (6 with "
                'pairs="all"), '
                f"got {tuple(stats.shape)}"
            )
        self.stat_fields: tuple[str, ...] = fields[stats.shape[2]]
        if heads is not None and (heads.dim() != 3 or heads.shape[0] != len(layers)
                                  or heads.shape[2] != stats.shape[2]):
            raise ValueError(
                f"heads must have shape (L, H, {stats.shape[2]}) with L = {len(layers)}, got "
                f"{tuple(heads.shape)}"
            )
        self._stats = stats.detach()
        self._heads = None if heads is None else heads.detach()
        self.components: tuple[str, ...] = components
        self.layers: tuple[str, ...] = layers
        self.meta: dict = dict(meta or {})
        self._host_cache: torch.Tensor | None = None
        self._host_heads: torch.Tensor | None = None

    # ---------------------------------------------------------------- raw sums
    @property
    def stats(self) -> torch.Tensor:
        """``(C, L, 5)`` float64 sums on their device (no synchronisation)."""
        return self._stats

    @property
    def head_stats(self) -> torch.Tensor | None:
        return self._heads

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def _host(self) -> torch.Tensor:
        if self._host_cache is None:  # the first value asked for: the only host-device sync
            self._host_cache = self._stats.to("cpu", torch.float64)
        return self._host_cache

    def _row(self, component: str) -> torch.Tensor:
        try:
            i = self.components.index(component)
        except ValueError:
            raise KeyError(
                f"component {component!r} was not measured; measured: {self.components}"
            ) from None
        return self._host()[i]

    # ---------------------------------------------------------------- derived values
    @staticmethod
    def _mean_std(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, tot, sq = s[..., 0], s[..., 1], s[..., 2]
        nan = torch.full_like(n, float("nan"))
        mean = torch.where(n > 0, tot / n.clamp_min(1), nan)
        var = (sq - tot * tot / n.clamp_min(1)) / (n - 1).clamp_min(1)
        std = torch.where(n > 1, var.clamp_min(0).sqrt(), nan)
        return mean, std

    def mean(self, component: str) -> torch.Tensor:
        """``(L,)`` float64 mean rate per layer (NaN where no pair was used)."""
        return self._mean_std(self._row(component))[0]

    def std(self, component: str) -> torch.Tensor:
        """``(L,)`` float64 sample standard deviation of the rates per layer."""
        return self._mean_std(self._row(component))[1]

    @staticmethod
    def _sem(s: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        if s.shape[-1] > len(STAT_FIELDS):  # pairs="all": jackknife variance of the U-statistics
            n = s[..., 0]
            return torch.where(n > 0, s[..., 5].sqrt() / n.clamp_min(1), torch.full_like(n, float("nan")))
        return std / s[..., 0].clamp_min(1).sqrt()

    def sem(self, component: str) -> torch.Tensor:
        """``(L,)`` float64 standard error of the mean rate per layer (see the module docstring)."""
        s = self._row(component)
        return self._sem(s, self._mean_std(s)[1])

    def ci(self, component: str) -> torch.Tensor:
        """``(L, 2)`` float64 95% CI per layer: ``mean -+ 1.96 sem`` (normal approximation)."""
        s = self._row(component)
        mean, std = self._mean_std(s)
        half = Z95 * self._sem(s, std)
        return torch.stack([mean - half, mean + half], dim=-1)

    def n_pairs(self, component: str) -> torch.Tensor:
        """``(L,)`` int64 pairs used per layer."""
        return self._row(component)[:, 0].round().long()

    def n_identical(self, component: str) -> torch.Tensor:
        """``(L,)`` int64 pairs excluded because their input distance is 0."""
        return self._row(component)[:, 3].round().long()

    def n_nonfinite(self, component: str) -> torch.Tensor:
        """``(L,)`` int64 pairs with a non-finite distance or rate (excluded)."""
        return self._row(component)[:, 4].round().long()

    def overall(self, component: str) -> float:
        """Mean over layers of the per-layer mean rates (layers without pairs skipped)."""
        m = self.mean(component)
        m = m[torch.isfinite(m)]
        return float(m.mean()) if m.numel() else float("nan")

    def ranking(self) -> list[tuple[str, float]]:
        """``[(component, overall mean), ...]``, most plastic first; the components of `unranked` are
        left out of it."""
        gone = set(self.unranked())
        vals = [(c, self.overall(c)) for c in self.components if c not in gone]
        return sorted(vals, key=lambda cv: -cv[1])

    def unranked(self) -> list[str]:
        """The components left out of `ranking`: no finite mean over layers, or a layer whose every pair
        was non-finite (its mean over layers would then leave that layer out, unlike the others')."""
        out = []
        for c in self.components:
            lost = (~torch.isfinite(self.mean(c))) & (self.n_nonfinite(c) > 0)
            if not math.isfinite(self.overall(c)) or bool(lost.any()):
                out.append(c)
        return out

    def nonfinite_warning(self) -> str | None:
        """One line naming the components (and layers) with non-finite pairs (non-finite weights,
        inputs or an overflow), which the means leave out, and the components left out of the ranking;
        None when every pair was finite."""
        report = self.nonfinite_report()
        if not report:
            return None
        per: dict[str, list[tuple[str, int]]] = {}
        for c, layer, n in report:
            per.setdefault(c, []).append((layer, n))
        parts = [f"{c} (layer{'s' if len(v) > 1 else ''} {', '.join(str(layer) for layer, _ in v)}: "
                 f"{sum(n for _, n in v)} pairs)" for c, v in per.items()]
        text = ("non-finite rates (NaN/inf: non-finite weights or inputs, or an overflow) in "
                f"{'; '.join(parts)}; those pairs are left out of the means")
        gone = self.unranked()
        return text + (f"; left out of the ranking (a layer without a finite rate): {', '.join(gone)}"
                       if gone else "")

    def head_mean(self) -> torch.Tensor:
        """``(L, H)`` float64 mean per-head MHA rates (``per_head=True``)."""
        if self._heads is None:
            raise ValueError("no per-head statistics: measure with capture(..., per_head=True)")
        if self._host_heads is None:
            self._host_heads = self._heads.to("cpu", torch.float64)
        return self._mean_std(self._host_heads)[0]

    def nonfinite_report(self) -> list[tuple[str, str, int]]:
        """``[(component, layer, pairs), ...]`` wherever a non-finite pair occurred."""
        h = self._host()
        return [
            (c, self.layers[l], int(h[i, l, 4]))
            for i, c in enumerate(self.components)
            for l in range(self.n_layers)
            if h[i, l, 4] > 0
        ]

    # ---------------------------------------------------------------- combination
    def merge(self, other: PlasticityResult) -> PlasticityResult:
        """Sums of two measurements of the same components and layers (e.g. two datasets)."""
        if other.components != self.components or other.layers != self.layers:
            raise ValueError(
                f"cannot merge results over {other.components} x {len(other.layers)} layers into "
                f"{self.components} x {len(self.layers)} layers"
            )
        if other._stats.shape[-1] != self._stats.shape[-1]:
            raise ValueError(
                f"cannot merge a pairs={other.meta.get('pairs')!r} result into a "
                f"pairs={self.meta.get('pairs')!r} one: their statistics differ ({other._stats.shape[-1]} "
                f"vs {self._stats.shape[-1]} fields)"
            )
        heads = None
        if self._heads is not None and other._heads is not None:
            heads = self._heads + other._heads.to(self._heads.device)
        return PlasticityResult(self._stats + other._stats.to(self._stats.device), self.components,
                                self.layers, heads=heads, meta=self.meta)

    def all_reduce(self, group=None) -> PlasticityResult:
        """The result over all ranks of ``group``: sums all-reduced (not means of means; every rank must
        call it, with the same components and layers)."""
        per_head = ", per head" if self._heads is not None else ""
        layout = f"{self.components} x {len(self.layers)} layers{per_head}"
        stats, heads, world = all_reduce_sums(self._stats, self._heads, layout, group=group)
        return PlasticityResult(stats, self.components, self.layers, heads=heads,
                                meta={**self.meta, "world_size": world})

    # ---------------------------------------------------------------- reports
    def table(self) -> str:
        """A text table: one row per layer, ``mean ± half-width of the 95% CI`` per component, the mean
        over layers, the pairs counted over all layers, and the ranking."""
        width = max(12, *(len(c) + 2 for c in self.components))
        head = f"{'layer':>6} " + "".join(f"{c:>{width}}" for c in self.components)
        lines = [head, "-" * len(head)]
        cols = {c: (self.mean(c), self.ci(c)) for c in self.components}
        for l, name in enumerate(self.layers):
            cells = []
            for c in self.components:
                m, ci = cols[c][0][l].item(), cols[c][1][l]
                half = (ci[1] - ci[0]).item() / 2
                cell = "n/a" if not math.isfinite(m) else (
                    f"{m:.3f}±{half:.3f}" if math.isfinite(half) else f"{m:.3f}"
                )
                cells.append(f"{cell:>{width}}")
            lines.append(f"{name:>6} " + "".join(cells))
        lines.append("-" * len(head))
        lines.append(f"{'mean':>6} " + "".join(f"{self.overall(c):>{width}.3f}" for c in self.components))
        lines.append("cells: mean rate ± half-width of its 95% CI; mean: over layers")
        pairs = {c: int(self.n_pairs(c).sum()) for c in self.components}
        excl = {c: int(self.n_identical(c).sum()) for c in self.components}
        bad = {c: int(self.n_nonfinite(c).sum()) for c in self.components}
        lines.append(f"pairs summed over layers: used {pairs}; identical (excluded) {excl}; non-finite {bad}")
        gone = self.unranked()
        lines.append("ranking: " + (" > ".join(f"{c} ({v:.3f})" for c, v in self.ranking()) or "none")
                     + (f"; left out (a layer without a finite rate): {', '.join(gone)}" if gone else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"PlasticityResult(components={self.components}, n_layers={self.n_layers}, "
                f"meta={self.meta})")

    def to_dict(self) -> dict:
        """JSON-ready dict: the raw sums (exact, for `from_dict`) and the derived values."""
        out: dict = {"format": "vitplast-plasticity/1", "meta": self.meta, "layers": list(self.layers),
                     "stat_fields": list(self.stat_fields), "components": {}}
        for i, c in enumerate(self.components):
            ci = self.ci(c)
            out["components"][c] = {
                "sums": self._host()[i].tolist(),
                "mean": _finite_or_none(self.mean(c).tolist()),
                "std": _finite_or_none(self.std(c).tolist()),
                "ci95": [_finite_or_none(r) for r in ci.tolist()],
                "n_pairs": self.n_pairs(c).tolist(),
                "n_identical": self.n_identical(c).tolist(),
                "n_nonfinite": self.n_nonfinite(c).tolist(),
                "overall": self.overall(c) if math.isfinite(self.overall(c)) else None,
            }
        out["ranking"] = [[c, v] for c, v in self.ranking()]
        if self.unranked():
            out["unranked"] = self.unranked()
        if self._heads is not None:
            out["heads"] = {"sums": self._heads.cpu().double().tolist(),
                            "mean": [_finite_or_none(r) for r in self.head_mean().tolist()]}
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> PlasticityResult:
        """Inverse of `to_dict` (rebuilt from the raw sums)."""
        comps = list(d["components"])
        stats = torch.tensor([d["components"][c]["sums"] for c in comps], dtype=torch.float64)
        stats = stats.reshape(len(comps), len(d["layers"]), len(d.get("stat_fields", STAT_FIELDS)))
        heads = torch.tensor(d["heads"]["sums"], dtype=torch.float64) if d.get("heads") else None
        return cls(stats, comps, d["layers"], heads=heads, meta=d.get("meta"))

    def to_json(self, path: str | os.PathLike) -> None:
        """Writes `to_dict` as JSON atomically (temporary file + ``os.replace``)."""
        text = json.dumps(self.to_dict(), indent=1)

        def write(tmp: str) -> None:
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())

        atomic_write(path, write)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> PlasticityResult:
        with open(path) as f:
            return cls.from_dict(json.load(f))

    # ---------------------------------------------------------------- tables and figures
    def records(self, *, heads: bool = False) -> list[dict]:
        """One dict per (component, layer), in report order: ``component``, ``layer``, ``mean``, ``std``,
        ``sem``, ``ci_low``, ``ci_high`` (95%), ``n_pairs``, ``n_identical``, ``n_nonfinite`` (NaN where
        undefined). ``heads=True``: one per (layer, head) of the per-head MHA rates instead, with a
        ``head`` column (``per_head=True`` measurements)."""
        if heads:
            self.head_mean()  # raises without per-head statistics; fills the host copy
            h = self._host_heads  # (L, H, F)
            keyed = [({"component": "MHA", "layer": self.layers[l], "head": k}, h[l, k])
                     for l in range(h.shape[0]) for k in range(h.shape[1])]
        else:
            host = self._host()
            keyed = [({"component": c, "layer": layer}, host[i, l])
                     for i, c in enumerate(self.components) for l, layer in enumerate(self.layers)]
        sums = torch.stack([s for _, s in keyed])  # (R, F)
        mean, std = self._mean_std(sums)
        sem = self._sem(sums, std)
        half = Z95 * sem
        return [{**keys, "mean": float(mean[r]), "std": float(std[r]), "sem": float(sem[r]),
                 "ci_low": float(mean[r] - half[r]), "ci_high": float(mean[r] + half[r]),
                 "n_pairs": round(float(s[0])), "n_identical": round(float(s[3])),
                 "n_nonfinite": round(float(s[4]))}
                for r, (keys, s) in enumerate(keyed)]

    def to_dataframe(self, *, heads: bool = False):
        """`records` as a ``pandas.DataFrame`` (one row per component and layer; ``heads=True``:
        per layer and head), the measurement's ``meta`` in ``DataFrame.attrs["meta"]``. ``component`` is an
        ordered categorical in the model's order; ``layer`` is an integer column when every layer label is
        an integer, otherwise an ordered categorical in block order, so sorting and grouping keep the
        model's order. Needs pandas
        (``pip install 'vitplast-kernels[pandas]'``)."""
        try:
            import pandas as pd
        except ModuleNotFoundError as exc:
            raise ImportError("PlasticityResult.to_dataframe needs pandas: pip install "
                              "'vitplast-kernels[pandas]' (or pip install pandas); to_csv does not") from exc
        frame = pd.DataFrame.from_records(self.records(heads=heads))
        frame["component"] = pd.Categorical(frame["component"], categories=list(self.components),
                                            ordered=True)
        if all(label.lstrip("-").isdigit() for label in self.layers):
            frame["layer"] = frame["layer"].astype("int64")
        else:  # e.g. Swin's "0.1": kept as text, ordered as the model orders its blocks
            frame["layer"] = pd.Categorical(frame["layer"], categories=list(self.layers), ordered=True)
        frame.attrs["meta"] = dict(self.meta)
        return frame

    def to_csv(self, path: str | os.PathLike, *, heads: bool = False) -> None:
        """Writes `records` as CSV atomically (a header row, then one row per component and layer;
        an undefined value is an empty cell). Needs nothing beyond the standard library."""
        atomic_write_csv(path, self.records(heads=heads))

    def plot(self, path: str | os.PathLike, *, kind: str = "curves", title: str | None = None) -> None:
        """Saves a figure (format from the suffix, atomically). ``kind="curves"``: the per-layer mean
        rate of each component with its 95% CI band, beside a box plot per component of its per-layer
        means; ``kind="heatmap"``: layers x components, each cell the mean rate, coloured on a scale
        centred at 1. Every component keeps its one colour
        (`component_color`)."""
        from .figures import plot_result

        plot_result(self, path, kind=kind, title=title)
