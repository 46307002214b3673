"""The plasticity a claim measures before finetuning, per dataset: loaded from the dataset's
``plasticity_chunks.json`` when it was measured with the same options and the file checks out (its
format and checksum, its statistics' shape and ranges: `read_chunks`), else measured
(`vitplast.claim.plasticity.measure_chunks`) on the model the finetuning runs start from, its
images prepared as theirs are; then the other criteria scored beside it (`measure_claim`, the phase
between the plan and the training). A file that fails its checks is measured again, with one line
naming it and why; the files reused are recorded with their checksums (``reused_files``).

What a saved measurement must have been made with to be reused is its ``config`` (as JSON reads it
back); its record is the model's provenance with the data the pairs come from, keyed with the options
(`vitplast.criteria.cache_key`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np

from vitplast_kernels.atomic_io import atomic_write_bytes

from ..criteria import cache_key
from ..criteria.plasticity import check_statistics
from ..data.datasets import load_dataset
from ..finetune.preflight import PreparedModel
from ..outputs.reporter import Reporter
from ..outputs.result_files import (
    ResultFileError,
    ReusedFile,
    count,
    field,
    read_result_json,
    write_result_json,
)
from .budget_plan import budget_sets
from .criteria_scores import claim_scores
from .datasets import DatasetPlan
from .options import ClaimOptions
from .plasticity import measure_chunks
from .samples import CHUNK_FIELDS
from .scoring import FOLDER

MEASUREMENT_KEYS = ("model", "weights", "model_kwargs", "img_size", "pretrained", "random_init",
                    "trust_remote_code", "model_transform", "mean", "std", "pretrain_data", "split",
                    "protocol", "pairs", "pair_batch", "measure_seed", "amp")
CHUNKS_FILE = "plasticity_chunks.json"
KIND, VERSION = "vitplast-plasticity-chunks", 1
# what the file holds of a measurement (claim_scores adds the criteria to it after)
SAVED = ("components", "layers", "stats", "pairs", "chunks", "seconds", "config", "provenance", "cache_key")


def write_chunks(path: str | os.PathLike, measured: dict) -> str:
    """Writes the measurement with its format and checksum; returns the checksum."""
    return write_result_json(path, {k: measured[k] for k in SAVED if k in measured}, kind=KIND,
                             version=VERSION)


def read_chunks(path: str | os.PathLike) -> dict:
    """The measurement saved at ``path``, checked: its checksum, every component and layer holding one
    row of statistics per chunk (finite; counts >= 0), ``pairs`` and ``chunks`` counts agreeing with
    them; `ResultFileError` naming the file and the field otherwise."""
    doc, _ = read_result_json(path, kind=KIND, versions=(VERSION,))
    comps, layers = field(doc, "components", path, list), field(doc, "layers", path, list)
    chunks = count(field(doc, "chunks", path, int), path, "chunks")
    count(field(doc, "pairs", path, int), path, "pairs")
    field(doc, "config", path, dict)
    stats = np.array(field(doc, "stats", path, list), dtype=object)
    shape = (chunks, len(comps), len(layers), len(CHUNK_FIELDS))
    if not comps or not layers or stats.shape != shape:
        raise ResultFileError(path, "stats", f"has shape {stats.shape}, not (chunks, components, layers, "
                              f"statistics) = {shape}")
    check_statistics(stats, CHUNK_FIELDS, path, "stats")
    return doc


def planned_measurement(opts: ClaimOptions, dataset: DatasetPlan, device, reporter: Reporter, *, amp,
                        progress: bool, model: PreparedModel) -> dict | None:
    """What planning needs of the measurement: a layer claim's chunks (its units come from them),
    saved ones or measured now, in memory (`measure_claim` writes them); for a component claim None,
    once a measurement saved with other options is refused (`saved_or_measured`)."""
    layer = opts.granularity == "layer"  # a component claim's failing file is named when measured
    return saved_or_measured(opts, dataset, device, reporter if layer else Reporter.silent(), amp=amp,
                             progress=progress, model=model, measure=layer)


def saved_or_measured(opts: ClaimOptions, dataset: DatasetPlan, device, reporter: Reporter, *, amp,
                      progress: bool, model: PreparedModel, measure: bool = True) -> dict | None:
    """The dataset's chunks: the saved ones when measured with these options on this model and the file
    checks out (`read_chunks`), with the file in ``reused_files``; else (one line naming a file that
    fails or holds another model's, and why) measured now on ``model`` (the dataset's model, built and
    checked once by `vitplast.finetune.preflight.prepare_model`; its images prepared as the runs prepare
    theirs), with the options they were measured with, the model's provenance and their cache key; with
    ``measure`` False, None instead of measuring. ``amp``: ``--amp``'s autocast contexts on ``device``
    (`vitplast.runtime.precision.autocast`, made once by the session). ValueError naming the options that
    differ."""
    path, built, transform = dataset.out / CHUNKS_FILE, model.built, model.prepared.transform
    config = json.loads(json.dumps({**{k: getattr(opts, k) for k in MEASUREMENT_KEYS}, "data": dataset.spec,
                                    "model_seed": opts.seed[0]}))
    saved = None
    try:
        saved = read_chunks(path) if path.exists() else None
    except ResultFileError as exc:
        reporter.say(f"plasticity{dataset.tag}: measuring again, {exc}")
    if saved is not None and saved["config"] != config:
        diffs = [k for k in config if saved["config"].get(k) != config[k]]
        raise ValueError(f"--out {dataset.out} holds a claim measured with other options "
                         f"({', '.join(diffs)}); choose another --out")
    if not measure:
        return None
    data = {"pretrain_data": opts.pretrain_data, "data": dataset.spec, "split": opts.split}
    # the model's record as the plan made it (`vitplast.runs.provenance.provenance`), of these data
    record = {**model.prepared.provenance, "data": data}
    key = cache_key(record, {"criterion": "plasticity", **config})
    if saved is not None and saved.get("cache_key") == key:
        reporter.say(f"plasticity{dataset.tag}: loaded from {path}")
        saved["reused_files"] = [ReusedFile(str(path), saved.pop("checksum")).to_dict()]
        saved.pop("format")
        return saved
    if saved is not None:
        reporter.say(f"plasticity{dataset.tag}: measuring again, " + str(ResultFileError(
            path, "cache_key", "measured on another model or data (weights, transform or images changed)")))
    x_set, y_set = (load_dataset(spec, opts.split, img_size=built.img_size, seed=opts.measure_seed,
                                 transform=transform) for spec in (opts.pretrain_data, dataset.spec))
    measured = measure_chunks(built.net, x_set, y_set, protocol=opts.protocol, pairs=opts.pairs,
                              pair_batch=opts.pair_batch, seed=opts.measure_seed, device=device,
                              amp=amp, progress=progress)
    measured.update(config=config, provenance=record, cache_key=key)
    reporter.say(f"plasticity{dataset.tag}: {measured['pairs']} matched pairs in {measured['chunks']} "
                 f"chunks, {measured['seconds']:.1f} s")
    return measured


def measure_claim(opts: ClaimOptions, grids: Sequence, device, reporter: Reporter, *, amp, progress: bool,
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
    first_arm: dict[str, DatasetPlan] = {}  # by --data: the arm that measures its dataset first
    for g in grids:
        if write and (first := first_arm.setdefault(g.dataset.spec, g.dataset)) is not g.dataset:
            share_measurement(first, g.dataset, reporter, chunks=g.measured is None)
        measured[g.key] = g.measured if g.measured is not None else saved_or_measured(
            opts, g.dataset, device, reporter, amp=amp, progress=progress, model=g.model)
        if write and "reused_files" not in measured[g.key]:  # measured now (a file that failed replaced)
            write_chunks(g.dataset.out / CHUNKS_FILE, measured[g.key])
        scores = claim_scores(opts, g.dataset, g.model, measured[g.key], g.units, g.names, device, reporter,
                              amp=amp, progress=progress, write=write)
        budgets[g.key] = budget_sets(opts, g.names, g.sizes, g.budget_plan.budgets, scores,
                                     g.trains + g.budget_trains, g.budget_plan.lora)
    return measured, budgets


def share_measurement(first: DatasetPlan, arm: DatasetPlan, reporter: Reporter, *,
                      chunks: bool = True) -> None:
    """The files ``first``, an earlier arm of the same dataset, measured and scored (its plasticity
    chunks unless ``chunks`` is False, as for a layer claim, whose arms measured while planning; its
    criteria's files) copied into ``arm``'s folder where it has none of its own. The arms of one dataset
    (its optimisers) measure the same model on the same images, so ``arm``'s readers then reuse them,
    after the checks any saved file gets (checksum, fields, and a cache key that must be the one ``arm``
    would measure with: else it is measured again)."""
    copied = []
    files = [first.out / CHUNKS_FILE] if chunks else []
    for src in files + sorted((first.out / FOLDER).glob("*.json")):
        dest = arm.out / src.relative_to(first.out)
        if src.is_file() and not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(dest, src.read_bytes())
            copied.append(str(src.relative_to(first.out)))
    if copied:
        reporter.say(f"measurement{arm.tag}: {', '.join(copied)} copied from {first.out} (the same model and "
                     "images; each reused only if its cache key is this arm's)")
