"""The criteria a claim compares with plasticity, scored per dataset on the model its finetuning runs
start from: ``DATASET_OUT/criteria/NAME.json`` (a ``CriterionResult``), reused when its cache key
(model provenance, data, options) is unchanged.

Loss-based criteria (``rgn``, ``fisher``) are scored per seed of the claim with the head that seed's
finetuning run starts from (the model built as the run builds it: ``torch.manual_seed(seed)``, then
``vitplast.finetune.fresh_model``); they, and ``cka``, read ``--criterion-batches`` batches of
``--batch-size`` labelled images of the dataset's training split, in the order ``--measure-seed``
draws. ``plasticity`` is the claim's own measurement (its chunks), not scored again here.
"""

from __future__ import annotations

from pathlib import Path

from ..outputs.reporter import Reporter
from .datasets import DatasetPlan
from .options import ClaimOptions

FOLDER = "criteria"
LABELLED = ("rgn", "fisher", "cka")
PER_SEED = ("rgn", "fisher")


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


def _labelled(opts: ClaimOptions, data, device) -> list:
    from ..criteria import Batch
    from ..data.datasets import make_loader

    out = []
    for item in make_loader(data, opts.batch_size, shuffle=True, seed=opts.measure_seed):
        if item is not None:
            out.append(Batch(item[0].to(device), item[1].to(device)))
        if len(out) == opts.criterion_batches:
            break
    if not out:
        raise ValueError(f"--criterion-batches: {opts.criterion_batches}: the training split of "
                         f"{opts.data} holds no labelled batch")
    return out


def score_dataset(opts: ClaimOptions, dataset: DatasetPlan, names: tuple[str, ...], device,
                  reporter: Reporter, *, progress: bool, write: bool) -> dict:
    """``{name: CriterionResult}`` of ``names`` (plasticity left out) on ``dataset``: read back when
    cached, else scored (and written when ``write``)."""
    import torch

    from ..criteria import Setting, get_criterion
    from ..criteria.cache import cache_key, cached
    from ..data.datasets import load_dataset
    from ..data.transforms import transform_record, with_overrides
    from ..finetune import fresh_model
    from ..models.builder import build_model
    from ..runs.provenance import provenance
    from ..runs.rundir import write_json_atomic
    from ..runtime.precision import autocast

    names = tuple(n for n in names if n != "plasticity")
    if not names:
        return {}
    n_classes = load_dataset(dataset.spec, "val", img_size=opts.img_size or 32, seed=0).num_classes
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(opts.seed[0])
        built = build_model(opts, n_classes, progress=progress)
    transform = with_overrides(built.transform, dataset.settings) if built.transform is not None else None
    record = provenance(built, {"data": dataset.spec, "split": "train"},
                        transform_record(transform, built.img_size))
    folder = Path(dataset.out) / FOLDER
    keys = {n: cache_key(record, _options(n, opts, dataset, device)) for n in names}
    out, todo = {}, []
    for n in names:
        saved = cached(folder / f"{n}.json", keys[n])
        if saved is not None:
            out[n] = saved
        else:
            todo.append(n)
    if todo:
        models: dict = {}

        def model_for(seed: int):
            if seed not in models:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)  # as the finetuning run of this seed builds its model
                    models[seed] = fresh_model(dataset.settings, n_classes).to(device).eval()
            return models[seed]

        batches = ()
        if any(n in LABELLED for n in todo):
            train = load_dataset(dataset.spec, "train", img_size=built.img_size, seed=opts.measure_seed,
                                 transform=transform)
            batches = _labelled(opts, train, device)
        setting = Setting(model_for, seeds=tuple(opts.seed), batches=batches,
                          components=dataset.settings.components, device=device,
                          amp=autocast(opts.amp, device), progress=progress)
        for n in todo:
            result = get_criterion(n).score(setting)
            result.meta.update(cache_key=keys[n], data=dataset.spec, model=built.name)
            out[n] = result
            if write:
                folder.mkdir(parents=True, exist_ok=True)
                write_json_atomic(folder / f"{n}.json", result.to_dict())
    reporter.say(f"criteria{dataset.tag}: " + ", ".join(
        f"{n} {'reused' if n not in todo else f'{out[n].cost.seconds:.1f} s'}" for n in names))
    return {n: out[n] for n in names}


def claim_criteria(opts: ClaimOptions, datasets: list[tuple[str, DatasetPlan]], device, reporter: Reporter,
                   *, progress: bool, write: bool) -> dict[str, dict]:
    """``{dataset key: {name: {"scores": {component: score}, "seconds": s}}}``: what
    `vitplast.claim.analysis.analyse` correlates with the gains, for each ``(key, dataset)`` of a
    component claim (``--criteria``; plasticity is the claim's own measurement)."""
    out = {}
    for key, dataset in datasets:
        scored = score_dataset(opts, dataset, tuple(opts.criteria), device, reporter, progress=progress,
                               write=write)
        out[key] = {n: {"scores": {c: r.overall(c) for c in r.components}, "seconds": r.cost.seconds}
                    for n, r in scored.items()}
    return out


def criteria_seconds(measured: dict) -> dict[str, float]:
    """Each criterion's scoring seconds, plasticity's the measurement's."""
    return {"plasticity": measured.get("seconds"),
            **{n: v["seconds"] for n, v in (measured.get("criteria") or {}).items()}}


def criteria_record(result: dict) -> dict:
    """What ``criteria.json`` holds: a row per (criterion, granularity) (``criterion``, ``granularity``,
    ``n``, ``spearman``, ``spearman_ci``, ``kendall``, ``p_value``, ``partial_size``, ``seconds``)."""
    seconds = result["measurement"].get("criteria_seconds") or {}
    rows = [{**r, "seconds": seconds.get(r["criterion"])} for r in result["analysis"].get("criteria") or []]
    return {"format": "vitplast-criteria/1", "rows": rows,
            "note": "higher score = finetune first; p_value: one-sided permutation (H1: rho > 0); "
                    "partial_size: Spearman with the trainable-parameter count held fixed (null for size)"}
