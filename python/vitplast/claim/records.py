"""A claim's analysis as typed records: what ``claim.json`` holds under ``analysis``, the same keys at
both granularities (``granularity`` says which; a record that does not apply is null). The reports,
the figures and the aggregate read these attributes; `.analysis` computes the numbers.

Each record is a frozen dataclass whose fields are the JSON keys; one codec (`decode`, `encode`)
turns a record into JSON and back by its type hints, so that `ClaimAnalysis.from_json` checks every
field it reads (a missing key, a number that is not one) and names the field when it fails
(`vitplast.outputs.result_files.ResultFileError`). Non-finite numbers are null in JSON and None here.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Union

from ..outputs.result_files import ResultFileError, read_result_json

CLAIM_FORMAT = ("vitplast-claim", 1)  # claim.json's (kind, version)
Interval2 = list  # [lo, hi], either None when undefined
Number = float | None


# PEP 681 (Python 3.11+): type checkers then see every subclass as the frozen dataclass it is
_dataclass_transform = getattr(typing, "dataclass_transform", lambda **kwargs: lambda cls: cls)


@_dataclass_transform(frozen_default=True)
class Record:
    """A record: every subclass is a frozen dataclass whose fields are its JSON keys, turned into JSON
    and back by the codec (`encode`, `decode`)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True)(cls)

    def to_json(self) -> dict:
        return encode(self)

    @classmethod
    def from_json(cls, doc: dict, path: str = "claim.json", where: str = "analysis"):
        return decode(cls, doc, path, where)


class Interval(Record):
    """A mean over seeds with its Student-t interval (``clipped``: cut at what the value can be)."""

    mean: Number
    ci: Interval2
    n: int | None = None
    interval: str = "student-t"
    clipped: str | None = None


class Correlation(Record):
    """A rank statistic: its value, bootstrap interval, permutation p-values."""

    value: Number
    ci: Interval2
    p_greater: Number
    p_two_sided: Number = None
    permutations: int | None = None
    exact: bool | None = None
    bootstrap_defined: Any = None


class RankCorrelations(Record):
    """Spearman's rho and Kendall's tau-b of one pair of rankings."""

    spearman: Correlation
    kendall: Correlation


class Ranking(Record):
    """The units in decreasing plasticity and in decreasing best-lr gain."""

    plasticity: list
    best_lr_gain: list


class Quantiles(Record):
    min: Number
    p10: Number
    median: Number
    p90: Number
    max: Number


class Setup(Record):
    """What a report says of how the claim was run (claim.json's ``config``, the fields it reads)."""

    model: str
    weights: str | None
    protocol: str
    pretrain_data: Any
    data: Any
    optimizer: str
    steps: int
    batch_size: int
    seed: list
    lr: list
    lr_auto: bool = False
    lrs_run: list | None = None  # with --lr auto, every lr some run used (claim.json's plan)

    @classmethod
    def of(cls, result: dict, path: str = "claim.json") -> Setup:
        """The setup of one dataset's claim.json content (its ``config``, and its plan's ``lrs_run``)."""
        plan = result.get("plan") or {}
        return decode(cls, {**result["config"], "lrs_run": plan.get("lrs_run")}, path, "config")


class UnitRow(Record):
    """A ranked unit: a whole component (``layer`` None) or one layer of one."""

    unit: str
    component: str
    layer: str | None
    layer_index: int | None
    plasticity: Number
    plasticity_ci: Interval2
    plasticity_per_layer: list | None
    plasticity_per_layer_ci: list | None
    pairs: int
    excluded_pairs: int
    lr: float
    lr_edge: str | None
    trainable_params: int
    accuracy: Interval
    accuracy_per_seed: list
    accuracy_by_lr: dict
    best_lr_gain: Interval
    best_lr_gain_per_seed: list
    relative_gain: Number
    relative_gain_validated: Number


class TrainRow(Record):
    """A train that is not ranked: the gain's reference (``baseline``: head, or the initial accuracy)
    or a baseline trained beside the units (full, lora)."""

    train: str
    lr: float | None = None
    lr_edge: str | None = None
    trainable_params: int | None = None
    accuracy: Interval | None = None
    accuracy_per_seed: list | None = None
    accuracy_by_lr: dict | None = None
    initial_accuracy: Interval | None = None
    best_lr_gain: Interval | None = None
    best_lr_gain_per_seed: list | None = None
    relative_gain: Number = None
    relative_gain_validated: Number = None


class Partial(Record):
    spearman: Number
    ci: Interval2
    p_greater: Number
    controls: str


class TypeSpearman(Record):
    spearman: Number
    ci: Interval2
    units: int
    trainable_params: int


class WithinType(Record):
    """Plasticity against gain within component types (size fixed): the stratified permutation test
    and each type's Spearman."""

    stratified_p_greater: Number
    stratified_p_two_sided: Number
    pooled_spearman: Number
    exact: bool | None  # None: undefined (no permutation run)
    permutations: int
    per_type: dict[str, TypeSpearman]


class Trend(Record):
    method: str
    slope: Number
    intercept: Number


class MeasuredComponent(Record):
    """A measured component's plasticity over all layers and per layer, with intervals and pairs."""

    value: Number
    ci: Interval2
    per_layer: list
    per_layer_ci: list
    pairs: int
    excluded: int


class Bootstrap(Record):
    replicates: int
    seeds: int
    pair_chunks: int
    pairs: int
    level: float
    withheld: str | None = None


class CriterionRow(Record):
    criterion: str
    granularity: str
    n: int
    spearman: Number
    spearman_ci: Interval2
    kendall: Number
    p_value: Number
    partial_size: Number


class PairedComparison(Record):
    n: int
    mean_difference: Number
    t: Number
    t_p: Number
    wilcoxon_p: Number
    t_p_holm: Number
    wilcoxon_p_holm: Number


class PairedTests(Record):
    """A reference component (MHA) against each other one (`.paired_tests.paired_tests`)."""

    reference: str
    comparisons: dict[str, PairedComparison]
    tests: str


class BudgetRow(Record):
    criterion: str
    budget: int
    train: str | None
    relative_gain: Number
    random_percentile: Number
    random_sets: int
    trainable_params: int | None


class RandomSets(Record):
    budget: int
    random_sets: int
    enumerated: bool
    random_relative_gain: Quantiles


class FullRow(Record):
    train: str
    relative_gain: Number
    trainable_params: int | None


class Budgets(Record):
    """The selection at equal budget (`.budgets`)."""

    unit: str
    rows: list[BudgetRow]
    budgets: list[RandomSets]
    full: FullRow
    percentile: str
    lora: str | None = None  # how LoRA's rows were sized, or why there are none (None: not recorded)


class RelativeGain(Record):
    definition: str
    validated: str


class ClaimAnalysis(Record):
    """One dataset's analysis: the rows of the ranked units, the reference and the baselines, the
    tests, and the budgets (None before they are analysed)."""

    granularity: str
    rows: list[UnitRow]
    baseline: TrainRow
    baselines: list[TrainRow]
    correlations: RankCorrelations
    params_correlations: RankCorrelations
    partial: Partial
    within_type: WithinType | None
    trend: Trend
    ranking: Ranking
    layers: list
    other_measured: dict[str, MeasuredComponent]
    lr_edges: list
    bootstrap: Bootstrap
    criteria: list[CriterionRow]
    verdict: str
    relative_gain: RelativeGain
    mha_tests: PairedTests | None
    budgets: Budgets | None = None

    @classmethod
    def read(cls, path) -> ClaimAnalysis:
        """The analysis of the claim.json at ``path``, its format, checksum and fields checked."""
        doc, _ = read_result_json(path, kind=CLAIM_FORMAT[0], versions=(CLAIM_FORMAT[1],))
        if "analysis" not in doc:
            raise ResultFileError(path, "analysis", "missing (a --shard's claim.json holds its runs only)")
        return cls.from_json(doc["analysis"], str(path))


# ------------------------------------------------------------------------------------------ the codec
def encode(value):
    """A record (or what it holds) as JSON: fields by name, non-finite numbers null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    return value


def decode(tp, value, path: str, where: str):
    """``value`` (JSON) as type ``tp``: records field by field (a missing field without a default is
    refused), lists and dicts item by item, numbers checked; `ResultFileError` naming ``where``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return decode(next(a for a in args if a is not type(None)), value, path, where)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ResultFileError(path, where, f"is a {type(value).__name__}, expected an object")
        hints = typing.get_type_hints(tp)
        out = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                out[f.name] = decode(hints[f.name], value[f.name], path, f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING:
                raise ResultFileError(path, f"{where}.{f.name}", "missing")
        return tp(**out)
    if origin is list or tp is list:
        if not isinstance(value, list):
            raise ResultFileError(path, where, f"is a {type(value).__name__}, expected a list")
        return [decode(args[0], v, path, f"{where}[{i}]") for i, v in enumerate(value)] if args else value
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ResultFileError(path, where, f"is a {type(value).__name__}, expected an object")
        return {k: decode(args[1], v, path, f"{where}.{k}") for k, v in value.items()} if args else value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ResultFileError(path, where, f"{value!r} is not a number")
        return float(value)
    if tp in (int, str, bool) and not (isinstance(value, tp) and (tp is bool or not isinstance(value, bool))):
        raise ResultFileError(path, where, f"{value!r} is not a {tp.__name__}")
    return value
