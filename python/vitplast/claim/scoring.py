"""The criteria a claim compares with plasticity, scored now (`score_now`) on the model its finetuning
runs start from: loss-based criteria (``rgn``, ``fisher``) per seed of the claim, each seed's model built
as that seed's finetuning run builds it (``torch.manual_seed(seed)``, then
``vitplast.finetune.fresh_model``); they, and ``cka``, read ``--criterion-batches`` batches of
``--batch-size`` labelled images of the dataset's training split, in the order ``--measure-seed``
draws. Reading back and writing scores is `.criteria_scores`'s."""

from __future__ import annotations

from ..finetune import PreparedModel
from ..runtime.precision import autocast
from .datasets import DatasetPlan
from .options import ClaimOptions

LABELLED = ("rgn", "fisher", "cka")
PER_SEED = ("rgn", "fisher")


def score_now(opts: ClaimOptions, dataset: DatasetPlan, model: PreparedModel, names: list[str], device, *,
           progress: bool) -> dict:
    """``{name: CriterionResult}`` of ``names``, scored now: each seed's model as its finetuning run
    starts it (built anew: the checks of the prepared one changed which parameters train), the labelled
    batches the training split's."""
    import torch

    from ..criteria import Batch, Setting, get_criterion
    from ..data.datasets import first_batches, load_dataset
    from ..finetune import fresh_model

    models: dict = {}

    def model_for(seed: int):
        if seed not in models:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)  # as the finetuning run of this seed builds its model
                models[seed] = fresh_model(dataset.settings, model.prepared.num_classes).to(device).eval()
        return models[seed]

    batches = ()
    if any(n in LABELLED for n in names):
        train = load_dataset(dataset.spec, "train", img_size=model.built.img_size, seed=opts.measure_seed,
                             transform=model.prepared.transform)
        found = first_batches(train, opts.batch_size, opts.criterion_batches, opts.measure_seed)
        if not found:
            raise ValueError(f"--criterion-batches: {opts.criterion_batches}: the training split of "
                             f"{opts.data} holds no labelled batch")
        batches = [Batch(images.to(device), labels.to(device)) for images, labels in found]
    setting = Setting(model_for, seeds=tuple(opts.seed), batches=batches,
                      components=dataset.settings.components, device=device,
                      amp=autocast(opts.amp, device), progress=progress)
    return {n: get_criterion(n).score(setting) for n in names}
