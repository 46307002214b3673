"""What a claim hands the scoring service (`vitplast.criteria.score_criteria`) for one dataset: the
request (each seed's model as that seed's finetuning run builds it,
``torch.manual_seed(seed)`` then ``vitplast.finetune.model.fresh_model``; the labelled sample, ``--criterion-
batches`` batches of ``--batch-size`` images of the dataset's training split in the order
``--measure-seed`` draws, drawn only when a criterion reads it) and the cache in
``DATASET_OUT/criteria/`` (the model's provenance, the data and options each key holds).
Both made at once by `score_inputs`; reading back and writing scores is `.criteria_scores`'s."""

from __future__ import annotations

from pathlib import Path

from ..criteria import ScoreCache, ScoringRequest, resolve_units
from ..criteria.service import labelled_sample, seeded_models
from ..data.datasets import load_dataset
from ..finetune.model import fresh_model
from ..finetune.preflight import PreparedModel
from .datasets import DatasetPlan
from .options import ClaimOptions

FOLDER = "criteria"


def score_inputs(opts: ClaimOptions, dataset: DatasetPlan, model: PreparedModel, device, *, amp,
                 progress: bool) -> tuple[ScoringRequest, ScoreCache]:
    """The `ScoringRequest` of ``dataset``'s criteria on ``model`` (built and checked once,
    `vitplast.finetune.preflight.prepare_model`): each seed's model built anew (the checks of the prepared one
    changed which parameters train), the labelled batches the training split's; and the `ScoreCache` of
    ``DATASET_OUT/criteria/``: the model's provenance (the dataset's training split, the runs' transform),
    the options every score depends on and what draws the labelled sample."""
    built, transform, settings = model.built, model.prepared.transform, dataset.settings
    # the model's record as the plan made it (`vitplast.runs.provenance.provenance`), of the training split
    record = {**model.prepared.provenance, "data": {"data": dataset.spec, "split": "train"}}
    cache = ScoreCache(Path(dataset.out) / FOLDER, record,
                       context={"data": dataset.spec, "components": settings.components, "amp": opts.amp,
                                "device": str(device), "model_seed": opts.seed[0]},
                       inputs={"images": {"criterion_batches": opts.criterion_batches,
                                          "batch_size": opts.batch_size, "measure_seed": opts.measure_seed}})

    def batches():
        train = load_dataset(dataset.spec, "train", img_size=built.img_size, seed=opts.measure_seed,
                             transform=transform)
        return labelled_sample(train, batch_size=opts.batch_size, count=opts.criterion_batches,
                               seed=opts.measure_seed, device=device,
                               what=f"the training split of {opts.data}")

    build = seeded_models(lambda: fresh_model(settings, model.prepared.num_classes), device)
    return ScoringRequest(build, resolve_units(built.net, settings.components), batches=batches,
                          seeds=tuple(opts.seed), components=settings.components, device=device,
                          amp=amp, progress=progress), cache
