"""The interface every criterion implements, and what it is given.

A **criterion** scores every (component, layer) **unit** of a model, **higher = finetune first**, from
a `Setting` (the model as the finetuning run of a seed starts it, a sample of labelled downstream
images, plasticity's paired images, the component map), and reports what scoring cost (`Cost`: seconds,
forward and backward passes, peak device memory). A component's score is the mean of its units' scores
over layers (``size``: the sum).

Subclasses of `Criterion` set ``name``, ``needs`` (what they read: ``"weights"``, ``"images"``, ``"labels"``,
``"backward"``, ``"pairs"``), ``per_seed`` (loss-based criteria depend on the head a seed initialises: scored
per seed, the score is the mean over seeds), ``layer_reduce`` and what a score can be (``value_range``,
``whole_values``: a file read back holding another is scored again), and implement `Criterion.score_units`
for one model. `Criterion.score` does the rest: seeds, timing, memory, the `CriterionResult`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from vitplast_kernels.measure.targets import resolve_components

from .loop import Batch
from .result import Cost, CriterionResult, seed_mean


@dataclasses.dataclass(frozen=True)
class Units:
    """The units of a model: ``components`` in report order, ``layers`` (labels, block order) and
    ``modules[(component, layer index)]``: the module names making the unit (absent: no such unit)."""

    components: tuple[str, ...]
    layers: tuple[str, ...]
    modules: dict[tuple[str, int], tuple[str, ...]]

    def parameters(self, net: torch.nn.Module, unit: tuple[str, int]) -> dict[str, torch.nn.Parameter]:
        """The unit's parameters by their name in ``net`` (each module's, recursively; no duplicates)."""
        named = dict(net.named_modules())
        out: dict[str, torch.nn.Parameter] = {}
        for m in self.modules.get(unit, ()):
            for n, p in named[m].named_parameters():
                out.setdefault(f"{m}.{n}", p)
        return out


def resolve_units(net: torch.nn.Module, components: Mapping | None = None) -> Units:
    """The units of ``net`` under ``components`` (``{label: glob}``; None: the detected preset), from the
    component map of `vitplast_kernels.measure.targets` (the capture's)."""
    resolved = resolve_components(net, components, None)
    index = {k: i for i, k in enumerate(resolved.layer_keys)}
    modules = {(c, index[k]): tuple(names) for c in resolved.components
               for k, names in resolved.modules[c].items()}
    return Units(tuple(resolved.components), tuple(".".join(k) for k in resolved.layer_keys), modules)


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a criterion may read.

    Args:
        model_for: the network (on ``device``) as the finetuning run of seed ``s`` starts it: pretrained
            weights, the head that seed initialises. Called once per seed by loss-based criteria, once
            (with ``seeds[0]``) by the others.
        seeds: the seeds of loss-based criteria.
        batches: labelled downstream images (`Batch`), the criterion's sample (``--criterion-batches``
            of them).
        pair_batches: plasticity's forward inputs in pairing order (a callable returning a fresh
            iterable), or None.
        components: the component map (``{label: glob}``; None: the preset).
        device: where the network runs; ``amp``: a context factory (autocast) or None.
        options: criterion options (plasticity: ``protocol``, ``pairs``, ``embedding``, ``limit``).
    """

    model_for: Callable[[int], torch.nn.Module]
    seeds: tuple[int, ...] = (0,)
    batches: Sequence[Batch] = ()
    pair_batches: Callable[[], Iterable] | None = None
    components: Mapping | None = None
    device: Any = "cpu"
    amp: Callable | None = None
    options: Mapping = dataclasses.field(default_factory=dict)
    progress: bool = False

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context the forward passes run in: ``amp()``, or none without ``amp``."""
        return self.amp() if self.amp else contextlib.nullcontext()


class Criterion:
    """Base of the criteria (see the module docstring)."""

    name: str = ""
    needs: frozenset[str] = frozenset()
    per_seed: bool = False
    layer_reduce: str = "mean"  # how a component's score is made from its units': "mean" or "sum"
    value_range: tuple[float, float] = (-math.inf, math.inf)  # what a unit's score can be; read back: checked
    whole_values: bool = False  # scores are counts

    def score_units(self, net: torch.nn.Module, units: Units, setting: Setting, cost: Cost
                    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(values (C, L) float64, extra {name: (C, L)})`` for ``net``: NaN where the criterion is not
        defined for a unit (or there is no such unit); ``cost``'s passes counted by the criterion."""
        raise NotImplementedError

    def options(self, setting: Setting) -> dict:
        """The options that change this criterion's scores (recorded, and part of its cache key)."""
        return {}

    @property
    def file_name(self) -> str:
        """The file its scores are kept in: ``NAME.json``."""
        return f"{self.name}.json"

    def write(self, result, path) -> str:
        """Writes ``result`` (a `CriterionResult`) to ``path`` with its checksum; returns the checksum."""
        return result.to_json(path)

    def read(self, path):
        """The `CriterionResult` saved at ``path``, checked (`CriterionResult.from_json`), its scores
        within what this criterion can give (``value_range``, ``whole_values``)."""
        result = CriterionResult.from_json(path)
        result.expect_range(*self.value_range, path, whole=self.whole_values)
        return result

    def score(self, setting: Setting) -> CriterionResult:
        """The `CriterionResult` of ``setting``: per seed when ``per_seed`` (the score the mean over
        seeds), with its `Cost`."""
        cuda = torch.device(setting.device).type == "cuda"
        if cuda:
            torch.cuda.synchronize(setting.device)
            torch.cuda.reset_peak_memory_stats(setting.device)
        cost = Cost()
        start = time.perf_counter()
        seeds = setting.seeds if self.per_seed else setting.seeds[:1]
        per_seed, extras, units = {}, {}, None
        for s in seeds:
            net = setting.model_for(s)
            units = units or resolve_units(net, setting.components)
            per_seed[s], extras[s] = self.score_units(net, units, setting, cost)
            del net
        if cuda:
            torch.cuda.synchronize(setting.device)
            cost.peak_memory = int(torch.cuda.max_memory_allocated(setting.device))
        cost.seconds = time.perf_counter() - start
        values = seed_mean(per_seed)
        extra = {k: np.mean(np.stack([extras[s][k] for s in seeds]), axis=0) for k in extras[seeds[0]]}
        return CriterionResult(
            criterion=self.name, components=units.components, layers=units.layers, values=values,
            per_seed=per_seed if self.per_seed else None, extra=extra, layer_reduce=self.layer_reduce,
            cost=cost, meta={"options": self.options(setting), "needs": sorted(self.needs),
                             "seeds": list(seeds) if self.per_seed else None})


def unit_grid(units: Units, values: Mapping[tuple[str, int], float] | None = None) -> np.ndarray:
    """A ``(C, L)`` float64 array of NaN: the values of no unit yet; ``values`` (``{unit: value}``) put
    in their units' places."""
    grid = np.full((len(units.components), len(units.layers)), np.nan)
    for (c, li), v in (values or {}).items():
        grid[units.components.index(c), li] = v
    return grid
