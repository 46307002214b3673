"""The runs of ``--budgets`` (`.budgets`) in a claim's grid: the sets that depend on no score (the
random sets, the attention rule's, and the head-only and full-finetuning references) planned with the
claim's own runs (`plan_budget_sets`), with at most how many runs the criteria's sets add once scored;
then, from the criteria's scores, each budget's sets and the trains the plan does not hold yet
(`budget_sets`)."""

from __future__ import annotations

import dataclasses

from ..finetune.lora import import_peft, lora_params_per_rank
from ..finetune.selection import part_sizes
from .budgets import (
    DEFAULT_COMPONENT_BUDGETS,
    LORA_RULE,
    REFERENCES,
    BudgetSets,
    LoraSizing,
    component_sets,
    layer_sets,
    upper_bound,
    with_lora,
)
from .options import ClaimOptions


@dataclasses.dataclass(frozen=True)
class BudgetPlan:
    """The budgets of one dataset's grid as planned before scoring."""

    budgets: list[int]  # --budgets as resolved: components, or parameters at layer granularity
    trains: list[str]  # the budgets' sets and references known before scoring, not in the claim's trains
    planned_runs: int  # the runs of those trains
    most_after_scoring: int  # at most how many more runs the criteria's sets add once scored
    lora: LoraSizing | None  # how LoRA's rows are sized (None: none, for the reason lora_note gives)
    lora_note: str  # how LoRA's rows were sized, or why there are none


def lora_sizing(net, components, names: list[str], sizes: dict | None) -> tuple[LoraSizing | None, str]:
    """How LoRA's rows are sized on ``net`` (the units ``names``, with their ``sizes`` at layer
    granularity; components' sizes read from ``net``), with the sentence saying so; None and the reason
    when peft is not installed or the model has no attention for LoRA."""
    try:
        import_peft()
        per_rank = lora_params_per_rank(net, components)
    except (ImportError, ValueError) as exc:
        return None, f"no LoRA row: {exc}"
    which = "the budget itself" if sizes is not None else "the median size of the budget's random sets"
    if sizes is None:
        sizes = {c: n for c, n in part_sizes(net, components).components.items() if c in names}
    return LoraSizing(per_rank, dict(sizes)), LORA_RULE.format(f"{which}; {per_rank:,} per unit of rank")


def plan_budget_sets(opts: ClaimOptions, names: list[str], sizes: dict | None, trains: list[str],
                     n_lrs: int, net, components) -> BudgetPlan:
    """The budgets' trains known before scoring (each budget's sets over ``names``, component names or
    a layer claim's unit names with their ``sizes``, beside the claim's ``trains``; ``n_lrs`` learning
    rates each; LoRA's rows sized on ``net`` with the component map ``components``), and the bound on
    the runs the criteria's sets add once scored (`vitplast.claim.budgets.upper_bound`)."""
    default = DEFAULT_COMPONENT_BUDGETS if sizes is None else [2 * max(sizes.values())]
    budgets = list(opts.budgets or default)
    references = [t for t in REFERENCES if t not in trains]
    lora, note = (lora_sizing(net, components, names, sizes) if "lora" in opts.components
                  else (None, "no LoRA row: lora is not among --components (the default adds it when peft "
                              "is installed: pip install 'vitplast-kernels[lora]')"))
    sets, new = budget_sets(opts, names, sizes, budgets, {}, trains + references, lora)
    bound = upper_bound(sets, n_criteria=len(dict.fromkeys(["plasticity", *opts.criteria])),
                        layer=sizes is not None)
    budget_trains = new + references
    per_run = n_lrs * len(opts.seed)
    return BudgetPlan(budgets, budget_trains, len(budget_trains) * per_run, bound["sets"] * per_run, lora,
                      note)


def budget_sets(opts: ClaimOptions, names: list[str], sizes: dict | None, budgets: list[int],
                scores: dict[str, dict], planned: list[str], lora: LoraSizing | None
                ) -> tuple[list[BudgetSets], list[str]]:
    """Each budget's sets over ``names`` (component names, or a layer claim's unit names with their
    ``sizes``) from the criteria ``scores`` (``{criterion: {unit: score}}``; none: the random sets and
    the attention rule only; LoRA's, sized by ``lora``), and their trains not in ``planned``, each once
    (sets several criteria pick are one run)."""
    common = dict(draws=opts.draws, seed=opts.stats_seed)
    if sizes is None:
        sets = [component_sets(scores, names, k, **common) for k in budgets]
    else:
        sets = [layer_sets(scores, names, sizes, b, **common) for b in budgets]
    sets = with_lora(sets, lora, layer=sizes is not None)
    new = [t for t in dict.fromkeys(t for s in sets for t in s.trains) if t not in planned]
    return sets, new
