"""``--train auto`` and ``--train auto@layer``: what to train, chosen by plasticity under a budget.

Plasticity is measured first (protocol ``in_situ``, the halves of the first training batches paired,
`plasticity_record`); then the highest-plasticity components (``auto``, `choose_components`) or (component,
layer) units (``auto@layer``, `choose_units`) whose parameters, with the head's, fit a budget of trainable
parameters are trained. `choose_auto` does both steps and returns the run's ``auto`` record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from torch import nn

from ..criteria.loop import measure_plasticity as measuring_loop
from ..runtime.distributed import DistContext
from .selection import AUTO_LAYER, TRAIN_ORDER, TrainPlan, labels, part_sizes
from .step_recorder import over_ranks, summarize


def plasticity_record(model: nn.Module, batches, *, dist: DistContext | None = None, amp=None,
                       components: Mapping | None = None) -> dict:
    """Plasticity (halves of each batch, in situ) summed over ``batches`` (an iterable of images
    ``(2B, 3, H, W)``; the one measuring loop, `vitplast.criteria.loop.measure_plasticity`) and over ranks;
    returns `summarize`'s dict. ``components``: the component map (``{label: glob}``; default: the model's
    preset)."""
    was_training = model.training
    model.eval()
    try:
        total = measuring_loop(model, batches, amp=amp, protocol="in_situ", pairs="halves",
                               components=components).result
    finally:
        model.train(was_training)
    if total is None:
        raise ValueError("plasticity_record: batches is empty")
    return summarize(over_ranks(total, dist))


def component_means(record: Mapping) -> dict[str, float]:
    """``{component: plasticity}`` (mean over layers) of a monitor record: the preset components in
    `TRAIN_ORDER`, then any others (``--component`` labels) in the record's order; undefined (NaN) values are
    left out."""
    means = record.get("plasticity_mean", {})
    order = [c for c in TRAIN_ORDER if c in means] + [c for c in means if c not in TRAIN_ORDER]
    return {c: means[c] for c in order if not math.isnan(means[c])}


def plasticity_means(plasticity) -> dict[str, float]:
    """``{component: mean plasticity over layers}`` from a PlasticityResult or a mapping."""
    if isinstance(plasticity, Mapping):
        return {str(k): float(v) for k, v in plasticity.items()}
    return {str(c): plasticity.overall(c) for c in plasticity.components}


def _fit(ranked: Sequence, sizes: Mapping, head: int, budget: int) -> list:
    """The items of ``ranked`` (highest plasticity first) whose ``sizes`` fit ``budget`` after the parameters
    the head takes from it (``head``), greedily: one that does not fit is skipped and the next, smaller one
    may still fit. ValueError when the head alone exceeds the budget."""
    if head > budget:
        raise ValueError(f"--budget {budget} is smaller than the head alone ({head} parameters)")
    chosen, used = [], head
    for item in ranked:
        if used + sizes[item] <= budget:
            chosen.append(item)
            used += sizes[item]
    return chosen


def choose_components(plasticity, model: nn.Module, budget: int | None = None, *, include_head: bool = True,
                      components: Mapping | None = None) -> list[str]:
    """Components to train, highest plasticity first, whose parameters (plus the head's) fit ``budget``.

    ``plasticity`` is a ``PlasticityResult`` or a ``{component: value}`` mapping (non-finite values and
    unknown components are skipped). Greedy: a component that does not fit is skipped and the next, smaller
    one may still fit. ``budget=None`` keeps only the single best component. ``components``: the component map
    (``{label: glob}``; default: the model's preset).
    """
    means = plasticity_means(plasticity)
    known = labels(components)
    ranked = sorted((c for c in known if c in means and means[c] == means[c]), key=lambda c: -means[c])
    if not ranked:
        raise ValueError(f"no plasticity for any of {', '.join(known)} (got {sorted(means)})")
    if budget is None:
        return ranked[:1]
    if budget <= 0:
        raise ValueError(f"--budget must be a positive number of parameters, got {budget}")
    sizes = part_sizes(model, components)
    return _fit(ranked, sizes.components, sizes.head if include_head else 0, budget)


def choose_units(plasticity: Mapping[str, Sequence[float]], model: nn.Module, budget: int, *,
                 components: Mapping | None = None, include_head: bool = True) -> list[str]:
    """(component, layer) units to train, highest plasticity first, whose parameters (plus the head's) fit
    ``budget``: greedy like `choose_components` over every unit. ``plasticity``:
    ``{component: [value per layer]}`` (a monitor record's ``"plasticity"``; NaN layers skipped). Returns
    ``--train`` parts such as ``["MHA@3", "FC1@2"]``."""
    if not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"--budget must be a positive number of parameters, got {budget}")
    parts = part_sizes(model, components)
    units = [((c, li), float(v)) for c, per in plasticity.items() for li, v in enumerate(per)
             if (c, li) in parts.units and v == v]
    if not units:
        raise ValueError(f"no plasticity for any (component, layer) of the model (got {sorted(plasticity)})")
    ranked = [u for u, _ in sorted(units, key=lambda u: -u[1]) if parts.units[u]]
    return [f"{c}@{li}" for c, li in _fit(ranked, parts.units, parts.head if include_head else 0, budget)]


def choose_auto(kind: str, model: nn.Module, batches, budget: int, *, dist: DistContext | None = None,
                amp=None, components: Mapping | None = None) -> dict:
    """The ``auto`` record of a run: plasticity measured on ``batches`` (`plasticity_record`) and what fits
    ``budget``. ``kind``: ``"auto"`` -> ``{"plasticity": {component: mean}, "chosen": [components]}``;
    ``"auto@layer"`` -> ``{"plasticity": {component: [value per layer]}, "chosen": ["MHA@3", ...]}``."""
    if kind not in ("auto", AUTO_LAYER):
        raise ValueError(f"choose_auto: kind must be 'auto' or {AUTO_LAYER!r}, got {kind!r}")
    measured = plasticity_record(model, batches, dist=dist, amp=amp, components=components)
    means = component_means(measured)
    if kind == AUTO_LAYER:
        layers = {c: measured["plasticity"][c] for c in means}
        return {"plasticity": layers, "chosen": choose_units(layers, model, budget, components=components)}
    return {"plasticity": means, "chosen": choose_components(means, model, budget, components=components)}


def describe_choice(kind: str, budget: int, auto: Mapping) -> str:
    """The line a run prints for its ``auto`` record: the plasticity measured and what it trains."""
    measured = ", ".join(f"{c} {v:.3f}" if isinstance(v, float) else f"{c} " + "/".join(f"{x:.2f}" for x in v)
                         for c, v in auto["plasticity"].items())
    trained = "+".join(auto["chosen"]) or "head only"
    return f"--train {kind} (budget {budget}): plasticity {measured} -> training {trained}"


def trained_parts(settings, train: str, model: nn.Module, feed, device, dctx: DistContext, amp, ckpt, log,
                  reporter) -> tuple[tuple[str, ...], dict | None]:
    """The parts ``train`` names, and for ``auto`` its record: the most plastic components within
    ``--budget``, measured on the first ``--auto-batches`` training batches (or read back from the checkpoint
    of a resumed run, so a resumed run trains what it trained)."""
    plan = TrainPlan.parse(train, settings.components)
    if not plan.is_auto:
        return plan.parts, None
    if ckpt is not None and "auto" in ckpt:
        auto = ckpt["auto"]
    else:
        batches = [feed.get(i)[0].to(device) for i in range(settings.auto_batches)]
        auto = choose_auto(plan.parts[0], model, batches, settings.budget, dist=dctx, amp=amp,
                           components=settings.components)
        log.log({"kind": "auto", "iter": -1, "step": 0, **auto, "budget": settings.budget})
    reporter.say(describe_choice(plan.parts[0], settings.budget, auto))
    return tuple(auto["chosen"]) or ("head",), auto

