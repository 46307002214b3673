"""Selection at equal budget: which set of units each criterion would finetune, and how its gain ranks
among random sets of the same budget.

For every budget of ``--budgets`` each criterion picks a set of units (higher score = finetune first;
a unit the criterion leaves undefined is skipped), and so does the ``attention`` rule. Each set is one
``vitplast finetune --train`` value (``MHA+FC1``, ``MHA@0+FC2@1``), trained for every lr and seed like
the claim's single units; a set several criteria pick is trained once.

- component granularity: the budget ``k`` is a number of components (the head is always trained and
  not counted); a criterion's set is its ``k`` best-scored components. Random sets: every ``k``-subset
  when there are at most `MAX_ENUMERATED` (``C(n, k)``: with 5 components at most 10), else
  ``--draws`` subsets drawn uniformly (seeded by ``--stats-seed`` and ``k``).
- layer granularity: the budget is a number of trainable parameters besides the head; a criterion's
  set is filled greedily, units in decreasing score order, each taken while it still fits. Random sets:
  every maximal set (no further unit fits) when the units are at most `MAX_ENUMERATED_UNITS` and those
  sets at most `MAX_ENUMERATED`, else ``--draws`` greedy fills of random unit orders (a greedy fill is
  always a maximal set).
- the ``attention`` rule (Touvron et al., *Three things everyone should know about Vision
  Transformers*, ECCV 2022): attention in every layer, nothing else. At component granularity that is
  the ``MHA`` component, one unit, so the rule applies at budget 1 only; at layer granularity it is
  ``MHA@0+...+MHA@L-1``, applied at every parameter budget it fits in (the same set at each).

- LoRA (peft, `vitplast.finetune.lora`) beside the criteria, at equal budget: adapters on every layer's
  attention of the rank whose trainable parameters besides the head are nearest the budget's (rank ``r``
  adds exactly ``r`` times `LoraSizing.per_rank`): at layer granularity the budget itself, at component
  granularity the median size of its random sets. It is a row like a criterion's (its set is the
  ``--train`` value ``lora:r=N``), with its real trainable-parameter count, when ``--components`` holds
  the ``lora`` baseline (which needs peft).

A set's gain is the claim's: ``relative_gain = (acc - acc_LP) / acc_LP`` (`.samples.relative_gains`:
acc the best over learning rates of the mean accuracy over seeds, acc_LP the head-only run's). Its
``random_percentile`` places it among the random sets' gains with mid-rank ties:
``100 (#{g_r < g} + #{g_r <= g}) / (2 n)`` (scipy.stats.percentileofscore, ``kind="mean"``). Full
finetuning (``full``) is trained as the reference line.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
from scipy import stats

from .analysis import finite
from .records import BudgetRow, Budgets, FullRow, Quantiles, RandomSets
from .samples import relative_gain_table

MAX_ENUMERATED = 50  # every random set is trained when there are at most this many
MAX_ENUMERATED_UNITS = 16  # layer granularity: sets enumerated over the 2**n subsets of at most 16 units
ATTENTION = "attention"
ATTENTION_COMPONENT = "MHA"
REFERENCES = ("head", "full")  # the gain's reference (linear probing) and the reference line
DEFAULT_COMPONENT_BUDGETS = (1,)
LORA = "lora"  # the row of LoRA at the rank nearest each budget
LORA_RULE = ("LoRA (peft) on every layer's attention, of the rank whose trainable parameters besides the "
             "head are nearest the budget's ({})")


def percentile_of_score(value: float, others: np.ndarray) -> float:
    """Where ``value`` lies among the finite ``others``, in percent, ties counted half (mid-rank,
    ``scipy.stats.percentileofscore(kind="mean")``); NaN when either is missing."""
    others = np.asarray(others, dtype=np.float64)
    others = others[np.isfinite(others)]
    if not math.isfinite(value) or others.size == 0:
        return math.nan
    return float(stats.percentileofscore(others, value, kind="mean"))


def quantile_summary(values: np.ndarray) -> dict:
    """``{"min", "p10", "median", "p90", "max"}`` of ``values`` (NaN when there are none)."""
    q = np.quantile(values, [0.0, 0.1, 0.5, 0.9, 1.0]) if np.asarray(values).size else np.full(5, np.nan)
    return dict(zip(("min", "p10", "median", "p90", "max"), (float(v) for v in q), strict=True))


@dataclasses.dataclass(frozen=True)
class BudgetSets:
    """One budget's sets: ``picks`` ``{criterion or "attention": train or None}`` (None: the rule picks
    nothing at this budget), the ``random`` sets' trains (one per draw; every set when ``enumerated``)."""

    budget: int
    picks: dict
    random: tuple
    enumerated: bool

    @property
    def trains(self) -> list[str]:
        return list(dict.fromkeys([t for t in self.picks.values() if t] + list(self.random)))


@dataclasses.dataclass(frozen=True)
class LoraSizing:
    """What LoRA's row needs: the parameters its adapters add per unit of rank, and the units' sizes
    (trainable parameters besides the head, by name: components, or a layer claim's units)."""

    per_rank: int
    sizes: dict

    def train(self, budget: BudgetSets, layer: bool) -> str:
        """``lora:r=N``, N the rank nearest ``budget``'s parameters (`LoraSizing` on which)."""
        target = budget.budget if layer else float(np.median(
            [sum(self.sizes[u] for u in t.split("+")) for t in budget.random]))
        return f"lora:r={max(1, round(target / self.per_rank))}"


def with_lora(sets: list[BudgetSets], lora: LoraSizing | None, layer: bool) -> list[BudgetSets]:
    """``sets`` with LoRA's pick at each budget (none without ``lora``: no lora among --components, no
    peft, or no attention to adapt)."""
    if lora is None:
        return sets
    return [dataclasses.replace(s, picks={**s.picks, LORA: lora.train(s, layer)}) for s in sets]


def set_train(members, units: list[str]) -> str:
    """The ``--train`` value of a set of units, its members in the claim's unit order."""
    return "+".join(sorted(members, key=units.index))


def ranked_units(scores: dict, units: list[str]) -> list[str]:
    """``units`` with a finite score, highest first (ties: the units' order)."""
    defined = [u for u in units if scores.get(u) is not None and math.isfinite(scores[u])]
    return sorted(defined, key=lambda u: -float(scores[u]))


def component_sets(scores: dict[str, dict], units: list[str], k: int, *, draws: int, seed: int) -> BudgetSets:
    """Budget ``k`` components: each criterion's ``k`` best (None when fewer are defined), attention
    (``MHA``, at ``k = 1`` only) and the random ``k``-subsets."""
    picks = {}
    for name, per_unit in scores.items():
        ranked = ranked_units(per_unit, units)
        picks[name] = set_train(ranked[:k], units) if len(ranked) >= k else None
    picks[ATTENTION] = ATTENTION_COMPONENT if k == 1 and ATTENTION_COMPONENT in units else None
    enumerated = math.comb(len(units), k) <= MAX_ENUMERATED
    if enumerated:
        random = [set_train(c, units) for c in itertools.combinations(units, k)]
    else:
        rng = np.random.default_rng([seed, k])
        random = [set_train([units[i] for i in rng.choice(len(units), k, replace=False)], units)
                  for _ in range(draws)]
    return BudgetSets(k, picks, tuple(random), enumerated)


def fill(order: list[str], sizes: dict, budget: int) -> list[str]:
    """Units of ``order`` taken one by one while they fit ``budget`` parameters in all."""
    chosen, used = [], 0
    for u in order:
        if used + sizes[u] <= budget:
            chosen.append(u)
            used += sizes[u]
    return chosen


def maximal_sets(units: list[str], sizes: dict, budget: int) -> list[list[str]] | None:
    """Every non-empty set of ``units`` within ``budget`` parameters that no further unit fits, or None
    when the units are too many to enumerate or the sets more than `MAX_ENUMERATED`."""
    n = len(units)
    if n > MAX_ENUMERATED_UNITS:
        return None
    masks = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(bool)  # (2^n, n)
    size = np.array([sizes[u] for u in units], dtype=np.int64)
    slack = budget - masks.astype(np.int64) @ size
    smallest_left_out = np.where(masks, np.iinfo(np.int64).max, size[None]).min(-1)
    keep = (slack >= 0) & (smallest_left_out > slack) & masks.any(-1)
    if keep.sum() > MAX_ENUMERATED:
        return None
    return [[units[i] for i in np.flatnonzero(m)] for m in masks[keep]]


def layer_sets(scores: dict[str, dict], units: list[str], sizes: dict, budget: int, *, draws: int,
               seed: int) -> BudgetSets:
    """A parameter ``budget`` at layer granularity: each criterion's greedy fill in score order,
    attention in every layer (where it fits) and the random sets."""
    fits = [u for u in units if 0 < sizes[u] <= budget]
    if not fits:
        raise ValueError(f"--budgets {budget}: no (component, layer) unit fits (the smallest has "
                         f"{min(sizes[u] for u in units):,} parameters)")
    picks = {}
    for name, per_unit in scores.items():
        chosen = fill(ranked_units(per_unit, fits), sizes, budget)
        picks[name] = set_train(chosen, units) if chosen else None
    attention = [u for u in units if u.split("@")[0] == ATTENTION_COMPONENT]
    fits_attention = attention and sum(sizes[u] for u in attention) <= budget
    picks[ATTENTION] = set_train(attention, units) if fits_attention else None
    every = maximal_sets(fits, sizes, budget)
    if every is not None:
        return BudgetSets(budget, picks, tuple(set_train(s, units) for s in every), True)
    rng = np.random.default_rng([seed, budget])
    random = [set_train(fill([fits[i] for i in rng.permutation(len(fits))], sizes, budget), units)
              for _ in range(draws)]
    return BudgetSets(budget, picks, tuple(random), False)


def upper_bound(sets: list[BudgetSets], *, n_criteria: int, layer: bool) -> dict:
    """At most how many sets the criteria add, once scored, to ``sets`` planned without scores (the
    random sets and the attention rule's): none where the random sets are every component set of the
    budget (a criterion's set is one of them); else one per criterion and budget (at layer granularity
    a criterion undefined on some units may pick a set that no unit can be added to only among the
    others, which is not among the maximal sets)."""
    per_budget = {s.budget: 0 if s.enumerated and not layer else n_criteria for s in sets}
    return {"per_budget": per_budget, "sets": sum(per_budget.values())}


def analyse_budgets(sets: list[BudgetSets], summaries: list, *, seeds: list[int], unit: str,
                    lora: str | None = None) -> Budgets:
    """Each budget's picks with their relative gain and random percentile, the random sets' spread and
    full finetuning's relative gain, from every run summary of the dataset. ``unit``: what a budget
    counts (``components`` or ``parameters``); ``lora``: how LoRA's rows were sized, or why there are
    none. The arrays first (`vitplast.claim.samples`), then the percentiles and quantiles
    (`percentile_of_score`, `quantile_summary`), then the rows."""
    gain, params = relative_gain_table(summaries, seeds)
    random = {b.budget: np.array([gain[t] for t in b.random], dtype=np.float64) for b in sets}
    spread = {b: quantile_summary(g[np.isfinite(g)]) for b, g in random.items()}
    places = {(b.budget, name): percentile_of_score(gain[t] if t else math.nan, random[b.budget])
              for b in sets for name, t in b.picks.items()}
    rows = [BudgetRow(name, b.budget, t, finite(gain[t] if t else math.nan), finite(places[b.budget, name]),
                      len(b.random), params.get(t)) for b in sets for name, t in b.picks.items()]
    return Budgets(unit, rows, [RandomSets(b.budget, len(b.random), b.enumerated,
                                           Quantiles(**finite(spread[b.budget]))) for b in sets],
                   FullRow("full", finite(gain.get("full", math.nan)), params.get("full")),
                   "mid-rank: 100 (#{random < g} + #{random <= g}) / (2 n)", lora)
