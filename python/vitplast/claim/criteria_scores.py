"""The criteria a claim compares with plasticity, per dataset, on the model its finetuning runs start
from: read back from ``DATASET_OUT/criteria/NAME.json`` (a ``CriterionResult``) when its cache key
(model provenance, data, options) is unchanged, else scored now (`.scoring.score_now`) and written;
then the scores the claim's analysis and its budgets' sets use (`claim_scores`). ``plasticity`` is the
claim's own measurement (its chunks), not scored again here.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..finetune import PreparedModel
from ..outputs.reporter import Reporter
from ..runs.rundir import write_json_atomic
from .datasets import DatasetPlan
from .options import ClaimOptions
from .samples import chunk_result, unit_means
from .scoring import LABELLED, PER_SEED, score_now

FOLDER = "criteria"


def _options(name: str, opts: ClaimOptions, dataset: DatasetPlan, device) -> dict:
    options = {"criterion": name, "data": dataset.spec, "components": dataset.settings.components,
               "amp": opts.amp,
               "device": str(device), "model_seed": opts.seed[0]}
    if name in LABELLED:
        options.update(criterion_batches=opts.criterion_batches, batch_size=opts.batch_size,
                       measure_seed=opts.measure_seed)
    if name in PER_SEED:
        options["seeds"] = list(opts.seed)
    return options


def score_dataset(opts: ClaimOptions, dataset: DatasetPlan, model: PreparedModel, names: tuple[str, ...],
                  device, reporter: Reporter, *, progress: bool, write: bool) -> dict:
    """``{name: CriterionResult}`` of ``names`` (plasticity left out) on ``dataset`` and its ``model``
    (built and checked once, `vitplast.finetune.prepare_model`): read back when cached, else scored
    (and written when ``write``)."""
    from ..criteria.cache import cache_key, cached
    from ..data.transforms import transform_record
    from ..runs.provenance import provenance

    names = tuple(n for n in names if n != "plasticity")
    if not names:
        return {}
    options = {n: _options(n, opts, dataset, device) for n in names}
    built, transform = model.built, model.prepared.transform
    record = provenance(built, {"data": dataset.spec, "split": "train"},
                        transform_record(transform, built.img_size))
    folder = Path(dataset.out) / FOLDER
    keys = {n: cache_key(record, options[n]) for n in names}
    out = {n: saved for n in names if (saved := cached(folder / f"{n}.json", keys[n])) is not None}
    todo = [n for n in names if n not in out]
    if todo:
        scored = score_now(opts, dataset, model, todo, device, progress=progress)
        for n in todo:
            scored[n].meta.update(cache_key=keys[n], data=dataset.spec, model=built.name)
            out[n] = scored[n]
            if write:
                folder.mkdir(parents=True, exist_ok=True)
                write_json_atomic(folder / f"{n}.json", scored[n].to_dict())
    reporter.say(f"criteria{dataset.tag}: " + ", ".join(
        f"{n} {'reused' if n not in todo else f'{out[n].cost.seconds:.1f} s'}" for n in names))
    return {n: out[n] for n in names}


def claim_scores(opts: ClaimOptions, dataset: DatasetPlan, model: PreparedModel, measured: dict,
                 units: list | None, names: list[str], device, reporter: Reporter, *, progress: bool,
                 write: bool) -> dict[str, dict]:
    """``{criterion: {unit: score}}`` the budgets' sets are picked by on one dataset: plasticity from
    its ``measured`` chunks first, then the other ``--criteria``, scored (or read back) on ``model``,
    the model its runs start from. A component claim's ``units`` are None (``names``: its ranked
    components); a layer claim's are its (component, layer) units, ``names`` theirs.

    Adds to ``measured`` what the analysis reads: ``"criteria"`` (a component claim's ``{name:
    {"scores": {component: score}, "seconds": s}}``, what `vitplast.claim.analysis.analyse` correlates
    with the gains) or ``"unit_scores"`` (a layer claim's scores, these), and ``"criteria_seconds"``
    (each criterion's scoring seconds, plasticity's the measurement's)."""
    results = score_dataset(opts, dataset, model, tuple(opts.criteria), device, reporter, progress=progress,
                            write=write)
    seconds = {"plasticity": measured.get("seconds"), **{n: r.cost.seconds for n, r in results.items()}}
    if units is None:
        measured["criteria"] = {n: {"scores": {c: r.overall(c) for c in r.components},
                                    "seconds": r.cost.seconds} for n, r in results.items()}
        measured["criteria_seconds"] = seconds
        plasticity = chunk_result(measured)
        return {"plasticity": {c: plasticity.overall(c) for c in names},
                **{n: v["scores"] for n, v in measured["criteria"].items()}}
    index = {c: i for i, c in enumerate(measured["components"])}
    means = unit_means(measured)
    named = list(zip(names, units, strict=True))
    scores = {"plasticity": {n: float(means[index[u[0]], u[1]]) for n, u in named}}
    for name, r in results.items():
        scores[name] = {n: float(r.values[r.components.index(u[0]), u[1]]) if u[0] in r.components
                        else math.nan for n, u in named}
    measured["unit_scores"], measured["criteria_seconds"] = scores, seconds
    return scores
