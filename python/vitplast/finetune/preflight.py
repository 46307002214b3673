"""What ``vitplast finetune`` checks before it creates any file, once per model: the model (name,
``--model-arg``, ``--weights``, ``--pretrained``), the data, the recipe (``--layer-decay``, ``--grad-accum``)
and what each ``--train`` value asks of them (``--probe``, ``--batch-size``, ``--budget``, the component map).
The option classes have checked every value on its own; these checks need the model or the data, so they build
both once (the caller's RNG state is left as it was). A bad value stops the command with nothing written. What
they find (the classes, the input size, the images' preparation, the reproducibility record) is kept in a
`Prepared` that every run of the grid receives; `prepare_model` also keeps the model it built
(`PreparedModel`), for the work a command does on it before the runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from ..data.transforms import ImageTransform, transform_record, with_overrides
from ..models.builder import BuiltModel
from ..models.heads import head_module
from ..runs.provenance import provenance
from .data import load_data
from .lora import lora_target_parts, lora_targets
from .model import built_model, make_optimizer
from .options import RunSettings
from .selection import ComponentMap, TrainPlan, component_map, count_parameters, select_trainable

CHECK_SIZE = 8  # the images' size while the data is checked, before the model says its own


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What the checks found, for every run of the same settings: the number of classes of ``--data``, the
    model's input size, how its images are prepared (None: the fixed preparation) and the reproducibility
    record (`vitplast.runs.provenance.provenance`) of the summaries."""

    num_classes: int
    img_size: int
    transform: ImageTransform | None = None
    provenance: dict[str, Any] | None = None
    component_map: ComponentMap | None = None  # resolved once (every run builds the same architecture)


@dataclasses.dataclass(frozen=True)
class PreparedModel:
    """The model of a grid's settings built and checked once: the network as a run of the first seed starts it
    (``built``: its head fresh, as `built_model` gives it) and what every run receives (``prepared``). A
    command that works on the model before the runs (a claim's measurement, its criteria, the sizes of its
    units) uses ``built`` instead of building the model again."""

    prepared: Prepared
    built: BuiltModel


def prepare(settings: RunSettings, trains: Sequence[str], seed: int) -> Prepared:
    """Raises ValueError (or FileNotFoundError for missing data) for what a run of ``settings`` with any of
    ``trains`` would fail on before training; writes nothing."""
    model = prepare_model(settings, seed)
    check_trains_fit(settings, trains, model)
    return model.prepared


def prepare_model(settings: RunSettings, seed: int) -> PreparedModel:
    """The checks of `prepare` that do not depend on ``--train``, with the model and data they build (the
    model drawn from ``torch.manual_seed(seed)``; the caller's RNG state is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first, _, _ = load_data(settings, seed, CHECK_SIZE)
        built = built_model(settings, first.num_classes)
        model, size = built.net, built.img_size
        transform = with_overrides(built.transform, settings.transform_request())
        train_ds, val_ds, _ = load_data(settings, seed, size, transform)
    if settings.batch_size % settings.grad_accum:
        raise ValueError(f"--grad-accum {settings.grad_accum}: must divide --batch-size "
                         f"{settings.batch_size}")
    if settings.layer_decay is not None:
        make_optimizer(settings, model, 1e-3)  # a model without block grouping raises here
    n = len(train_ds)
    if n == 0 or len(val_ds) == 0:
        raise ValueError(f"--data {settings.data}: no {'training' if n == 0 else 'validation'} images")
    for flag, value in (("--batch-size", settings.batch_size), ("--probe", settings.probe)):
        if value > n:
            raise ValueError(f"{flag} {value} exceeds the training set of --data {settings.data} "
                             f"({n} images)")
    try:
        cmap = component_map(model, settings.components)
    except ValueError:  # no preset for this model: only full, head and lora (with targets) train it
        cmap = None
    data = {"data": settings.data, "classes": first.num_classes, "train_images": n, "val_images": len(val_ds)}
    record = transform_record(transform, size)
    return PreparedModel(Prepared(num_classes=first.num_classes, img_size=size, transform=transform,
                                  provenance=provenance(built, data, record), component_map=cmap), built)


def check_trains_fit(settings: RunSettings, trains: Sequence[str], model: PreparedModel) -> None:
    """`check_train` of every value of ``trains`` on the prepared model."""
    for train in dict.fromkeys(trains):
        check_train(settings, train, model.built.net, model.prepared.component_map)


def check_train(settings: RunSettings, train: str, model: torch.nn.Module,
                cmap: ComponentMap | None = None) -> None:
    """What one ``--train`` value needs of the model: its components and layers, LoRA targets, a ``--budget``
    above the head."""
    comps = settings.components
    plan = TrainPlan.parse(train, comps)
    if plan.is_lora:
        # a map without the targets (by default its attention) raises ValueError here
        lora_targets(model, lora_target_parts(settings.lora_targets, comps), comps)
        return  # peft and --lora-r are checked with the options
    if plan.is_auto:
        head = sum(p.numel() for p in head_module(model).parameters())
        if settings.budget < head:
            raise ValueError(f"--budget {settings.budget} is smaller than the classifier head alone "
                             f"({head:,} parameters of {count_parameters(model):,}): --train auto trains the "
                             "head and the most plastic components that fit")
        return
    select_trainable(model, plan.parts, comps, cmap)  # a map lacking what is named raises here
