"""The plasticity a claim measures before finetuning, per dataset: loaded from the dataset's
``plasticity_chunks.json`` when it was measured with the same options, else measured
(`vitplast.claim.plasticity.measure_chunks`) on the model the finetuning runs start from, its
images prepared as theirs are."""

from __future__ import annotations

import json
from pathlib import Path

from ..finetune import PreparedModel
from ..outputs.reporter import Reporter
from ..runs.rundir import write_json_atomic
from ..runtime.precision import autocast
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


def measure_dataset(opts: ClaimOptions, dataset: DatasetPlan, device, reporter: Reporter, *, progress: bool,
                    write: bool, model: PreparedModel) -> dict:
    """The dataset's chunks: saved ones (`saved_measurement`), else measured now on ``model`` (the
    dataset's model, built and checked once by `vitplast.finetune.prepare_model`; its images prepared
    as the runs prepare theirs) and written when ``write``."""
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
    if write:
        write_json_atomic(dataset.out / CHUNKS_FILE, measured)
    reporter.say(f"plasticity{dataset.tag}: {measured['pairs']} matched pairs in {measured['chunks']} "
                 f"chunks, {measured['seconds']:.1f} s")
    return measured


def write_measurement(dataset: DatasetPlan, measured: dict) -> None:
    """Saves chunks measured earlier (a layer claim measures before it plans) unless already saved."""
    path: Path = dataset.out / CHUNKS_FILE
    if not path.exists():
        write_json_atomic(path, measured)
