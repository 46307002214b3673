"""The criteria a claim compares with plasticity, per dataset, on the model its finetuning runs start
from, through the scoring service (`vitplast.criteria.score_criteria`): read back from
``DATASET_OUT/criteria/NAME.json`` (a ``CriterionResult``) when its cache key (model provenance, data,
options) is unchanged and the file checks out, else scored now and written; then the scores the claim's
analysis and its budgets' sets use (`claim_scores`). ``plasticity`` is the claim's own measurement (its
chunks, `.measurement`), not scored again here.
"""

from __future__ import annotations

import math

from ..criteria import Scores, score_criteria
from ..finetune.preflight import PreparedModel
from ..outputs.reporter import Reporter
from .datasets import DatasetPlan
from .options import ClaimOptions
from .samples import plasticity_samples
from .scoring import score_inputs


def score_dataset(opts: ClaimOptions, dataset: DatasetPlan, model: PreparedModel, names: tuple[str, ...],
                  device, reporter: Reporter, *, amp, progress: bool, write: bool) -> Scores:
    """The `Scores` of ``names`` (plasticity left out) on ``dataset`` and its ``model`` (built and
    checked once, `vitplast.finetune.preflight.prepare_model`): read back when cached, else scored (and
    written when ``write``)."""
    names = tuple(n for n in names if n != "plasticity")
    if not names:
        return Scores({})
    request, cache = score_inputs(opts, dataset, model, device, amp=amp, progress=progress)
    scores = score_criteria(names, request, cache=cache, say=reporter.say)
    for n, result in scores.items():
        if n in scores.reused:
            continue
        result.meta.update(data=dataset.spec, model=model.built.name)
        if write:
            cache.write(result)
    reporter.say(f"criteria{dataset.tag}: " + ", ".join(
        f"{n} {'reused' if n in scores.reused else f'{r.cost.seconds:.1f} s'}" for n, r in scores.items()))
    return scores


def claim_scores(opts: ClaimOptions, dataset: DatasetPlan, model: PreparedModel, measured: dict,
                 units: list | None, names: list[str], device, reporter: Reporter, *, amp, progress: bool,
                 write: bool) -> dict[str, dict]:
    """``{criterion: {unit: score}}`` the budgets' sets are picked by on one dataset: plasticity from
    its ``measured`` chunks first, then the other ``--criteria``, scored (or read back) on ``model``,
    the model its runs start from. A component claim's ``units`` are None (``names``: its ranked
    components); a layer claim's are its (component, layer) units, ``names`` theirs.

    Adds to ``measured`` what the analysis reads: ``"criteria"`` (a component claim's ``{name:
    {"scores": {component: score}, "seconds": s}}``, what `vitplast.claim.analysis.analyse` correlates
    with the gains) or ``"unit_scores"`` (a layer claim's scores, these), and ``"criteria_seconds"``
    (each criterion's scoring seconds, plasticity's the measurement's)."""
    results = score_dataset(opts, dataset, model, tuple(opts.criteria), device, reporter, amp=amp,
                            progress=progress, write=write)
    measured["reused_files"] = [*measured.get("reused_files", []),
                                *(r.to_dict() for r in results.reused.values())]
    seconds = {"plasticity": measured.get("seconds"), **{n: r.cost.seconds for n, r in results.items()}}
    plasticity = plasticity_samples(measured)
    index = {c: i for i, c in enumerate(plasticity.components)}
    if units is None:
        measured["criteria"] = {n: {"scores": {c: r.overall(c) for c in r.components},
                                    "seconds": r.cost.seconds} for n, r in results.items()}
        measured["criteria_seconds"] = seconds
        return {"plasticity": {c: float(plasticity.overall[index[c]]) for c in names},
                **{n: v["scores"] for n, v in measured["criteria"].items()}}
    named = list(zip(names, units, strict=True))
    scores = {"plasticity": {n: float(plasticity.per_layer[index[u[0]], u[1]]) for n, u in named}}
    for name, r in results.items():
        scores[name] = {n: float(r.values[r.components.index(u[0]), u[1]]) if u[0] in r.components
                        else math.nan for n, u in named}
    measured["unit_scores"], measured["criteria_seconds"] = scores, seconds
    return scores
