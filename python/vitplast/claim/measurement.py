"""The plasticity a claim measures before finetuning, per dataset: loaded from the dataset's
``plasticity_chunks.json`` when it was measured with the same options and the file checks out (its
format and checksum, its statistics' shape and ranges: `read_chunks`), else measured
(`measure_chunks`, below) on the model the finetuning runs start from, its
images prepared as theirs are; then the other criteria scored beside it (`measure_claim`, the phase
between the plan and the training). A file that fails its checks is measured again, with one line
naming it and why; the files reused are recorded with their checksums (``reused_files``).

Plasticity before finetuning, for `vitplast claim`: matched X-Y pairs measured chunk by chunk.

X is the pretraining-side dataset, Y the downstream one; pair ``i`` is ``(X[a_i], Y[b_i])`` with
``a``, ``b`` random orders drawn from ``seed``. The pairs are measured in chunks of ``pair_batch``
pairs, one forward of ``cat([X chunk, Y chunk])`` each under ``vitplast_kernels.capture(pairs="halves")``,
and each chunk's sums ``[count, sum, sumsq, identical, nonfinite]`` per (component, layer) are kept
apart (``ChunkedResult.chunk_stats``). Chunks are the resampling unit of the bootstrap over pairs (a
chunk of one pair resamples single pairs, ``ChunkedResult.replicate_means``); the sums of all chunks
are exactly the measurement of all pairs at once.

The measured model is the one the finetuning runs start from (``vitplast.models.builder``, with
the same weights)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..criteria import ScoringRequest, cache_key, score_criteria
from ..criteria.plasticity import check_statistics
from ..data.datasets import load_dataset
from ..data.transforms import transform_record
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
from ..runs.provenance import provenance
from ..runtime.precision import autocast
from .budget_plan import budget_sets
from .criteria_scores import claim_scores
from .datasets import DatasetPlan
from .options import ClaimOptions
from .samples import CHUNK_FIELDS

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


def measurement_config(opts: ClaimOptions, dataset: DatasetPlan) -> dict:
    """What a saved measurement must have been made with to be reused (as JSON reads it back)."""
    config = {k: getattr(opts, k) for k in MEASUREMENT_KEYS}
    return json.loads(json.dumps({**config, "data": dataset.spec, "model_seed": opts.seed[0]}))


def _provenance(opts: ClaimOptions, dataset: DatasetPlan, model: PreparedModel) -> tuple[dict, str]:
    """``(record, cache key)`` of the dataset's measurement on ``model``: the model's provenance with
    the data the pairs come from, keyed with the options (`vitplast.criteria.cache_key`)."""
    built = model.built
    data = {"pretrain_data": opts.pretrain_data, "data": dataset.spec, "split": opts.split}
    record = provenance(built, data, transform_record(model.prepared.transform, built.img_size))
    return record, cache_key(record, {"criterion": "plasticity", **measurement_config(opts, dataset)})


def saved_measurement(opts: ClaimOptions, dataset: DatasetPlan, model: PreparedModel,
                      reporter: Reporter) -> dict | None:
    """The dataset's saved chunks when measured with these options on this model and the file checks
    out (`read_chunks`), with the file in ``reused_files``; None when there are none, or the file fails
    or holds another model's (one line naming it and why); ValueError naming the options that differ."""
    path = dataset.out / CHUNKS_FILE
    if not path.exists():
        return None
    try:
        saved = read_chunks(path)
        config = measurement_config(opts, dataset)
        if saved["config"] != config:
            diffs = [k for k in config if saved["config"].get(k) != config[k]]
            raise ValueError(f"--out {dataset.out} holds a claim measured with other options "
                             f"({', '.join(diffs)}); choose another --out")
        if saved.get("cache_key") != _provenance(opts, dataset, model)[1]:
            raise ResultFileError(path, "cache_key", "measured on another model or data (weights, "
                                  "transform or images changed)")
    except ResultFileError as exc:
        reporter.say(f"plasticity{dataset.tag}: measuring again, {exc}")
        return None
    saved["reused_files"] = [ReusedFile(str(path), saved.pop("checksum")).to_dict()]
    saved.pop("format")
    return saved


def planned_measurement(opts: ClaimOptions, dataset: DatasetPlan, device, reporter: Reporter, *,
                        progress: bool, model: PreparedModel) -> dict | None:
    """What planning needs of the measurement: a layer claim's chunks (its units come from them),
    saved ones or measured now, in memory (`measure_claim` writes them); for a component claim None,
    once a measurement saved with other options is refused (`saved_measurement`)."""
    if opts.granularity != "layer":
        saved_measurement(opts, dataset, model, Reporter.silent())  # a failing file is named when measured
        return None
    return _saved_or_measured(opts, dataset, device, reporter, progress=progress, model=model)


def _saved_or_measured(opts: ClaimOptions, dataset: DatasetPlan, device, reporter: Reporter, *,
                       progress: bool, model: PreparedModel) -> dict:
    """The dataset's chunks: saved ones (`saved_measurement`), else measured now on ``model`` (the
    dataset's model, built and checked once by `vitplast.finetune.preflight.prepare_model`; its images
    prepared as the runs prepare theirs), with the options they were measured with, the model's provenance and
    their cache key."""
    saved = saved_measurement(opts, dataset, model, reporter)
    if saved is not None:
        reporter.say(f"plasticity{dataset.tag}: loaded from {dataset.out / CHUNKS_FILE}")
        return saved
    built, transform = model.built, model.prepared.transform
    record, key = _provenance(opts, dataset, model)
    x_set = load_dataset(opts.pretrain_data, opts.split, img_size=built.img_size, seed=opts.measure_seed,
                         transform=transform)
    y_set = load_dataset(dataset.spec, opts.split, img_size=built.img_size, seed=opts.measure_seed,
                         transform=transform)
    measured = measure_chunks(built.net, x_set, y_set, protocol=opts.protocol, pairs=opts.pairs,
                              pair_batch=opts.pair_batch, seed=opts.measure_seed, device=device,
                              amp=autocast(opts.amp, device), progress=progress)
    measured.update(config=measurement_config(opts, dataset), provenance=record, cache_key=key)
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
        if write and "reused_files" not in measured[g.key]:  # measured now (a file that failed replaced)
            write_chunks(path, measured[g.key])
        scores = claim_scores(opts, g.dataset, g.model, measured[g.key], g.units, g.names, device, reporter,
                              progress=progress, write=write)
        budgets[g.key] = budget_sets(opts, g.names, g.sizes, g.budget_plan.budgets, scores,
                                     g.trains + g.budget_trains)
    return measured, budgets


def _images(dataset, idx: np.ndarray):
    import torch

    images = getattr(dataset, "images", None)
    if isinstance(images, torch.Tensor):
        return images[torch.as_tensor(idx, dtype=torch.long)]
    return torch.stack([dataset[int(i)][0] for i in idx])


def plan_chunks(n_x: int, n_y: int, pairs: int, pair_batch: int) -> int:
    """Chunks that fit: ``pairs // pair_batch``, fewer when the smaller dataset holds fewer images."""
    if pair_batch < 1 or pairs < pair_batch:
        raise ValueError(f"--pairs ({pairs}) must be at least --pair-batch ({pair_batch}) >= 1")
    fit = min(n_x, n_y) // pair_batch
    if fit < 1:
        raise ValueError(f"--pair-batch {pair_batch}: the data holds too few images for one chunk "
                         f"({n_x} X / {n_y} Y images)")
    return min(pairs // pair_batch, fit)


def _pair_batches(x_set, y_set, order_x: np.ndarray, order_y: np.ndarray, chunks: int, pair_batch: int,
                  device):
    """Each chunk's forward input: ``cat([X chunk, Y chunk])`` (halves pairing)."""
    import torch

    for k in range(chunks):
        sl = slice(k * pair_batch, (k + 1) * pair_batch)
        yield torch.cat([_images(x_set, order_x[sl]), _images(y_set, order_y[sl])]).to(device)


def measure_chunks(net, x_set, y_set, *, protocol: str, pairs: int, pair_batch: int, seed: int,
                   device, amp=None, progress: bool = False) -> dict:
    """Measure ``pairs`` matched pairs in chunks, plasticity scored through the scoring service
    (`vitplast.criteria.score_criteria`, one chunk per forward of the one measuring loop); returns
    ``{"components", "layers", "stats" (chunks, C, L, 5) float64 list, "pairs", "chunks", "seconds"}``."""
    import torch

    chunks = plan_chunks(len(x_set), len(y_set), pairs, pair_batch)
    if chunks * pair_batch < pairs:
        warnings.warn(f"--pairs {pairs}: the data holds {chunks * pair_batch} matched pairs in chunks of "
                      f"{pair_batch}; measuring those", stacklevel=2)
    rng = np.random.default_rng(seed)
    order_x = rng.permutation(len(x_set))[: chunks * pair_batch]
    order_y = rng.permutation(len(y_set))[: chunks * pair_batch]
    net = net.to(device).eval()
    request = ScoringRequest(
        lambda s: net, device=device, amp=amp, progress=progress,
        pair_batches=lambda: _pair_batches(x_set, y_set, order_x, order_y, chunks, pair_batch, device),
        options={"protocol": protocol, "pairs": "halves", "chunks": True, "desc": f"plasticity ({protocol})"})
    result = score_criteria(("plasticity",), request)["plasticity"]
    res = result.measurement
    if tuple(res.stat_fields[: len(CHUNK_FIELDS)]) != CHUNK_FIELDS:
        raise RuntimeError(f"the result's statistics {res.stat_fields} do not start with {CHUNK_FIELDS}")
    stats = res.chunk_stats[..., : len(CHUNK_FIELDS)].detach().to("cpu", torch.float64)
    return {"components": list(res.components), "layers": list(res.layers), "stats": stats.numpy().tolist(),
            "pairs": chunks * pair_batch, "chunks": chunks, "seconds": result.cost.seconds}
