"""The plasticity a claim measures before finetuning, per dataset: loaded from the dataset's
``plasticity_chunks.json`` when it was measured with the same options, else measured
(`vitplast.claim.plasticity.measure_chunks`) on the model the finetuning runs start from, its
images prepared as theirs are; then the other criteria scored beside it (`measure_claim`, the phase
between the plan and the training)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ..finetune import PreparedModel
from ..outputs.reporter import Reporter
from ..runs.rundir import write_json_atomic
from ..runtime.precision import autocast
from .budget_plan import budget_sets
from .criteria_scores import claim_scores
from .datasets import DatasetPlan
from .options import ClaimOptions
from .plasticity import measure_chunks

MEASUREMENT_KEYS = ("model", "weights", "model_kwargs", "img_size", "pretrained", "random_init",
                    "trust_remote_code", "model_transform", "mean", "std", "pretrain_data", "split",
                    "protocol", "pairs", "pair_batch", "measure_seed", "amp")
CHUNKS_FILE = "plasticity_chunks.json"


def measurement_config(opts: ClaimOptions, dataset: DatasetPlan) -> dict:
    """What a saved measurement must have been made with to be reused."""
    config = {k: getattr(opts, k) for k in MEASUREMENT_KEYS}
    return {**config, "data": dataset.spec, "model_seed": opts.seed[0]}


def saved_measurement(opts: ClaimOptions, dataset: DatasetPlan) -> dict | None:
    """The dataset's saved chunks when measured with these options, None when there are none;
    ValueError naming the options that differ."""
    path = dataset.out / CHUNKS_FILE
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    config = json.loads(json.dumps(measurement_config(opts, dataset)))
    saved_config = {"trust_remote_code": False, **saved.get("config", {})}  # written before the option
    if saved_config != config:
        diffs = [k for k in config if saved_config.get(k) != config[k]]
        raise ValueError(f"--out {dataset.out} holds a claim measured with other options "
                         f"({', '.join(diffs)}); choose another --out")
    return saved


def planned_measurement(opts: ClaimOptions, dataset: DatasetPlan, device, reporter: Reporter, *,
                        progress: bool, model: PreparedModel) -> dict | None:
    """What planning needs of the measurement: a layer claim's chunks (its units come from them),
    saved ones or measured now, in memory (`measure_claim` writes them); for a component claim None,
    once a measurement saved with other options is refused (`saved_measurement`)."""
    if opts.granularity != "layer":
        saved_measurement(opts, dataset)
        return None
    return _saved_or_measured(opts, dataset, device, reporter, progress=progress, model=model)


def _saved_or_measured(opts: ClaimOptions, dataset: DatasetPlan, device, reporter: Reporter, *,
                       progress: bool, model: PreparedModel) -> dict:
    """The dataset's chunks: saved ones (`saved_measurement`), else measured now on ``model`` (the
    dataset's model, built and checked once by `vitplast.finetune.prepare_model`; its images prepared
    as the runs prepare theirs), with the options they were measured with and the model's provenance."""
    from ..data.datasets import load_dataset
    from ..data.transforms import transform_record
    from ..runs.provenance import provenance

    saved = saved_measurement(opts, dataset)
    if saved is not None:
        reporter.say(f"plasticity{dataset.tag}: loaded from {dataset.out / CHUNKS_FILE}")
        return saved
    built, transform = model.built, model.prepared.transform
    config = measurement_config(opts, dataset)  # what the chunks are measured with, and their record
    data = {"pretrain_data": opts.pretrain_data, "data": dataset.spec, "split": opts.split}
    record = provenance(built, data, transform_record(transform, built.img_size))
    x_set = load_dataset(opts.pretrain_data, opts.split, img_size=built.img_size, seed=opts.measure_seed,
                         transform=transform)
    y_set = load_dataset(dataset.spec, opts.split, img_size=built.img_size, seed=opts.measure_seed,
                         transform=transform)
    measured = measure_chunks(built.net, x_set, y_set, protocol=opts.protocol, pairs=opts.pairs,
                              pair_batch=opts.pair_batch, seed=opts.measure_seed, device=device,
                              amp=autocast(opts.amp, device), progress=progress)
    measured.update(config=config, provenance=record)
    reporter.say(f"plasticity{dataset.tag}: {measured['pairs']} matched pairs in {measured['chunks']} "
                 f"chunks, {measured['seconds']:.1f} s")
    return measured


def measure_claim(opts: ClaimOptions, grids: Sequence, device, reporter: Reporter, *, progress: bool,
                  write: bool) -> tuple[dict[str, dict], dict[str, tuple[list, list[str]]]]:
    """The measure and score phase over ``grids`` (each dataset's `DatasetGrid`): each dataset's
    plasticity chunks (written when ``write``; a layer claim's measured while planning), its
    ``--criteria`` scored (`.criteria_scores.claim_scores`), and from those scores the budgets' sets
    with the trains the plan does not hold yet (`.budget_plan.budget_sets`: the budgets' second
    phase); both by the runs' dataset name. A ``--shard`` measures and scores nothing (the final pass
    does)."""
    measured: dict[str, dict] = {}
    budgets: dict[str, tuple[list, list[str]]] = {}
    if opts.shard is not None:
        return measured, budgets
    for g in grids:
        measured[g.key] = g.measured if g.measured is not None else _saved_or_measured(
            opts, g.dataset, device, reporter, progress=progress, model=g.model)
        path: Path = g.dataset.out / CHUNKS_FILE
        if write and not path.exists():
            write_json_atomic(path, measured[g.key])
        scores = claim_scores(opts, g.dataset, g.model, measured[g.key], g.units, g.names, device, reporter,
                              progress=progress, write=write)
        budgets[g.key] = budget_sets(opts, g.names, g.sizes, g.budget_plan.budgets, scores,
                                     g.trains + g.budget_trains)
    return measured, budgets
