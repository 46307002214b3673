"""The criteria ``vitplast measure --criterion`` scores besides (or instead of) plasticity: their setting
on the measured model (`setting_for`), their cache key (`criterion_key`: the model's provenance,
the data and the options that change the scores) and their files (`criterion_files`,
`write_criterion`). A rerun into the same ``--out`` reuses every ``NAME.json`` whose key matches
(`reusable`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .options import CRITERION_NAMES, MeasureOptions

# what a criterion writes beside run.json (plasticity writes the PlasticityResult's files instead)
SUFFIXES = (".json", ".csv", ".txt", ".png", "_heatmap.png")
PLASTICITY_FILES = ("plasticity.json", "plasticity.png", "plasticity_heatmap.png")
# criteria that read labelled images, and those whose scores depend on the seed's head
LABELLED = ("rgn", "fisher", "cka")
PER_SEED = ("rgn", "fisher")


def criterion_files(name: str) -> tuple[str, ...]:
    """The files criterion ``name`` writes."""
    if name == "plasticity":
        return PLASTICITY_FILES
    return tuple(f"{name}{s}" for s in SUFFIXES)


def every_criterion_file() -> tuple[str, ...]:
    """Every file a criterion may write: what an output set of ``vitplast measure`` owns."""
    return tuple(f for n in CRITERION_NAMES for f in criterion_files(n))


def seeds_of(opts: MeasureOptions) -> tuple[int, ...]:
    """The seeds of the loss-based criteria: ``--criterion-seeds``, else ``--seed``."""
    return tuple(opts.criterion_seeds) if opts.criterion_seeds else (opts.seed,)


def criterion_key(name: str, opts: MeasureOptions, record: dict, device) -> str:
    """sha256 of what ``name``'s scores depend on: the provenance ``record`` (model, weights' hash,
    data, transform; library versions left out), and the criterion's options
    (`vitplast.criteria.cache.cache_key`)."""
    from vitplast.criteria.cache import cache_key as key_of

    options: dict[str, Any] = {"criterion": name, "components": opts.components, "amp": opts.amp,
                               "device": str(device), "split": opts.split}
    if name in LABELLED:
        options.update(criterion_batches=opts.criterion_batches, batch_size=opts.batch_size, seed=opts.seed)
    if name in PER_SEED:
        options["seeds"] = list(seeds_of(opts))
    return key_of(record, options)


# the fields of run.json that plasticity's scores depend on (with its provenance, versions left out)
PLASTICITY_FIELDS = ("protocol", "pairs", "batches", "batch_size", "seed", "amp", "device", "img_size",
                     "split", "components", "embedding")


def _plasticity_key(fields: dict, record: dict) -> str:
    prov = {k: v for k, v in record.items() if k != "versions"}
    text = json.dumps({"provenance": prov, **{k: fields.get(k) for k in PLASTICITY_FIELDS}}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def saved_plasticity(opts: MeasureOptions, record: dict, device, img_size: int):
    """``(PlasticityResult, batches, bad images)`` saved in ``--out`` when its run.json records the same
    provenance and measuring options (every batch asked for measured), else None."""
    from vitplast_kernels import PlasticityResult

    if opts.out is None:
        return None
    run, plast = Path(opts.out) / "run.json", Path(opts.out) / "plasticity.json"
    try:
        old = json.loads(run.read_text())
        wanted = {"protocol": opts.protocol, "pairs": opts.pairs, "batches": opts.batches,
                  "batch_size": opts.batch_size, "seed": opts.seed, "amp": opts.amp, "device": str(device),
                  "split": opts.split, "components": opts.components, "embedding": opts.embedding,
                  "img_size": img_size}
        same = _plasticity_key(old, old.get("provenance", {})) == _plasticity_key(
            json.loads(json.dumps(wanted)), json.loads(json.dumps(record, default=str)))
        if not same:
            return None
        return PlasticityResult.from_json(plast), int(old["batches"]), list(old.get("bad_images", []))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def reusable(out: str | None, name: str, key: str):
    """The ``CriterionResult`` saved in ``out/NAME.json`` when its cache key is ``key``, else None."""
    from vitplast.criteria.cache import cached

    return None if out is None else cached(Path(out) / f"{name}.json", key)


def labelled_batches(opts: MeasureOptions, dataset, device) -> list:
    """The criterion's sample: the first ``--criterion-batches`` batches of ``--batch-size`` labelled
    images of ``dataset`` (the downstream data: ``--pair-data`` when given, else ``--data``), in the
    order ``--seed`` draws."""
    from vitplast.criteria import Batch
    from vitplast.data.datasets import make_loader

    out = []
    for item in make_loader(dataset, opts.batch_size, shuffle=True, seed=opts.seed, num_workers=opts.workers):
        if item is None:
            continue
        out.append(Batch(item[0].to(device), item[1].to(device)))
        if len(out) == opts.criterion_batches:
            break
    if not out:
        raise ValueError(f"--criterion-batches {opts.criterion_batches}: the data holds no labelled batch")
    return out


def setting_for(opts: MeasureOptions, subject, names: tuple[str, ...], progress: bool):
    """The `vitplast.criteria.Setting` of ``names`` on ``subject`` (the measured model): the
    model per seed as a finetuning run of that seed starts it (rebuilt with that seed drawing its head,
    so the head is the run's), the downstream labelled sample when a criterion reads images."""
    import torch

    from vitplast.criteria import Setting
    from vitplast.models.builder import build_model
    from vitplast.models.families import family_of
    from vitplast.runtime.precision import autocast

    downstream = subject.data.y if subject.data.y is not None else subject.data.x
    classes = downstream.num_classes
    models: dict[int, torch.nn.Module] = {}

    def model_for(seed: int) -> torch.nn.Module:
        if seed not in models:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                built = build_model(opts, classes, allow_partial=opts.allow_partial_weights,
                                    cache_dir=opts.cache_dir, seed=opts.seed,
                                    pretrain_config=opts.pretrain_config)
                if family_of(built.name).keeps_pretraining_head:  # a finetuning run replaces it
                    built.net.reset_classifier(classes)
            models[seed] = built.net.to(subject.device).eval()
        return models[seed]

    needs_images = any(n in LABELLED for n in names)
    batches = labelled_batches(opts, downstream, subject.device) if needs_images else ()
    return Setting(model_for, seeds=seeds_of(opts), batches=batches, components=opts.components,
                   device=subject.device, amp=autocast(opts.amp, subject.device), progress=progress)


def write_criterion(tmp: Path, result) -> None:
    """``NAME.json``, ``NAME.csv``, ``NAME.txt`` (the table), ``NAME.png`` (per component) and
    ``NAME_heatmap.png`` (layers x components) into ``tmp``."""
    name = result.criterion
    result.to_json(tmp / f"{name}.json")
    result.to_csv(tmp / f"{name}.csv")
    (tmp / f"{name}.txt").write_text(result.table() + "\n")  # tmp: the output set's, renamed in whole
    result.plot(tmp / f"{name}.png")
    result.plot(tmp / f"{name}_heatmap.png", kind="heatmap")
