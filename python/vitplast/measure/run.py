"""``measure(...)``: the measurement behind ``vitplast measure`` (its options: `MeasureOptions`).

Order of work: every option is checked, then ``out`` (it must be able to receive the output set), then the
datasets are opened and the model built with its weights and components, and the datasets opened again with
the model's own input preparation; only then do the forward passes run. The output set (``plasticity.json``,
``plasticity.png``, ``plasticity_heatmap.png``, ``run.json``) is written as a unit
(`vitplast.runs.output_set`); ``run.json`` holds the reproducibility record
(`vitplast.runs.provenance.provenance`: versions, model, weights' sha256 or hub revision, data, transform).
The capture ``vitplast measure`` attaches to its model (`make_capture`): the presets, or the components and
embedding its options name (any model); the model itself comes from `vitplast.models.builder`.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from typing import Any

import torch

import vitplast_kernels
from vitplast.data.transforms import transform_record, with_overrides
from vitplast.models.builder import build_model
from vitplast.models.families import FAMILIES
from vitplast.models.sources import plan_model
from vitplast.runs.output_set import OutputSet
from vitplast.runs.provenance import provenance
from vitplast.runs.rundir import write_json_atomic
from vitplast.runtime.device import resolve_device

from ..criteria import CRITERIA, Scores, score_criteria
from ..criteria.plasticity import Plasticity
from ..options.fields import options_for
from ..outputs.reporter import Reporter
from .criteria import criteria_request, criterion_files, out_cache, plasticity_request, write_criterion
from .data import MeasureData, batches_to_run, open_data
from .options import MeasureOptions

# the images' size while the data is checked, before the model says its own (in-memory data stays small)
CHECK_SIZE = 8
# run.json records the autocast dtype by its torch name as "dtype", beside "amp"
AUTOCAST_DTYPES = {"none": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclasses.dataclass(frozen=True)
class Subject:
    """What the forward passes run: the built model (``net`` on ``device``, in eval mode), its capture
    (not yet attached) and the data at the model's input size."""

    built: Any  # vitplast.models.builder.BuiltModel
    net: Any
    capture: Any
    data: MeasureData
    device: Any
    img_size: int
    transform: Any  # vitplast.data.transforms.ImageTransform, or None: the fixed preparation


def measure(opts: MeasureOptions | None = None, /, *, reporter: Reporter | None = None, **keywords: Any):
    """Measure a model's plasticity; returns the ``vitplast_kernels`` ``PlasticityResult`` (with ``criterion``
    naming one other criterion: its ``CriterionResult``; several: ``{name: result}``). `measure_scores`
    measures the same and returns every criterion's result as one `vitplast.criteria.Scores`.

    ``opts``: a `MeasureOptions`, checked again here; or the options as keywords (each the option
    of ``vitplast measure`` with that name, None: its default), e.g. ``measure(out="res/", batches=2)``;
    keywords given with ``opts`` replace its values.

    ``model=None`` -> the embedded digits ViT, or the architecture of the ``vitplast finetune`` run that
    wrote ``weights``; ``data=None`` -> ``"digits:0-4"`` matched with ``pair_data="digits:5-9"``. Each
    of the ``batches`` forward passes sees ``batch_size`` images: ``batch_size / 2`` pairs with
    ``pairs="halves"`` or matched data, every distinct pair of the batch with ``pairs="all"``.
    ``components``/``embedding``: the capture's (any model; default: the presets). ``out``: a
    directory receiving ``plasticity.json``, ``plasticity.png`` and ``run.json`` as one set.
    ``reporter``: where the summary lines go (default: printed; ``Reporter.silent()``: nowhere).
    """
    scores = measure_scores(opts, reporter=reporter, **keywords)
    found = {n: r.measurement if n == "plasticity" else r for n, r in scores.items()}
    return next(iter(found.values())) if len(found) == 1 else found


def measure_scores(opts: MeasureOptions | None = None, /, *, reporter: Reporter | None = None,
                   **keywords: Any) -> Scores:
    """What `measure` measures (the same options), as one `vitplast.criteria.Scores`: each criterion's
    ``CriterionResult`` by name (plasticity's ``measurement``: the ``PlasticityResult``), the files of ``out``
    reused with their checksums. This is what ``vitplast measure`` and ``vitplast.measure(...)`` run."""
    opts = options_for(MeasureOptions, opts, keywords)  # keywords over opts' values, a new checked set
    say = (reporter or Reporter()).say
    # the output set owns every file a criterion may write
    out_set = None if opts.out is None else OutputSet(opts.out, (
        "run.json", *(f for n in CRITERIA for f in criterion_files(n))))
    if out_set is not None:  # checked: it can receive the files
        out_set.check()
    start = time.perf_counter()
    subject = _prepare(opts, _model_name(opts))
    prepare_seconds = time.perf_counter() - start  # building the model (a first-run pretraining included)
    start = time.perf_counter()
    say(f"model: {subject.built.description}, "
        f"{sum(p.numel() for p in subject.net.parameters()) / 1e6:.2f} M parameters")
    names = tuple(opts.criterion)
    # the reproducibility record of the measured model, data and transform
    record = provenance(subject.built, dict(data=opts.data, pair_data=opts.pair_data, split=opts.split,
                                            images=subject.data.sizes()),
                        transform_record(subject.transform, subject.img_size))
    cache = out_cache(opts, record, subject.device, subject.img_size)
    parts = [_plasticity(opts, subject, cache, say, start)] if "plasticity" in names else []
    elapsed = time.perf_counter() - start
    if others := [n for n in names if n != "plasticity"]:
        parts.append(_criteria(opts, subject, cache, others, say))
    scores = Scores({n: p[n] for n in names for p in parts if n in p},
                    {k: v for p in parts for k, v in p.keys.items()},
                    {k: v for p in parts for k, v in p.reused.items()})
    if out_set is not None:
        _write_outputs(out_set, opts, subject, scores, record, elapsed=elapsed,
                       prepare_seconds=prepare_seconds)
        say(f"wrote {', '.join(str(out_set.target / f) for f in _files(names))}")
    return scores


def _plasticity(opts: MeasureOptions, subject: Subject, cache, say, start: float) -> Scores:
    """Plasticity through the scoring service: read back from ``--out``'s plasticity.json when its key
    (the same model, data and options) matches and it checks out, else the forward passes inside the
    capture. Its result's meta records the batches measured and the bad images skipped."""
    def failed(exc: Exception, batch) -> ValueError:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ValueError(f"{subject.built.name}: the forward pass failed on {tuple(batch.images.shape)} "
                          f"images (--img-size {subject.img_size}?): {text[:300]}")

    request = plasticity_request(opts, subject, limit=batches_to_run(opts, subject.data),
                                 progress=_shows_progress(opts), say=say, on_error=failed)
    scores = score_criteria(("plasticity",), request, cache=cache, say=say)
    result = scores["plasticity"]
    res = result.measurement
    if "plasticity" in scores.reused:
        say(f"plasticity: reused {scores.reused['plasticity'].path} (same model, data and options)")
        say(res.table())
        return scores
    measured, bad = result.cost.forwards, subject.data.bad_images()
    result.meta.update(batches=measured, bad_images=bad)
    if bad:
        warnings.warn(f"skipped {len(bad)} unreadable image(s): {', '.join(bad[:5])}"
                      f"{' ...' if len(bad) > 5 else ''}", stacklevel=3)
    if nonfinite := res.nonfinite_warning():  # NaN/inf weights or activations: named, left out explicitly
        warnings.warn(nonfinite, stacklevel=3)
    say(res.table())  # ends with the ranking line
    skipped = f"; {len(bad)} bad images skipped" if bad else ""
    say(f"({measured} batches x {opts.batch_size} images, {opts.protocol}, {AUTOCAST_DTYPES[opts.amp]} on "
        f"{subject.device}, {time.perf_counter() - start:.1f} s{skipped})")
    return scores


def _criteria(opts: MeasureOptions, subject: Subject, cache, names: list[str], say) -> Scores:
    """The criteria other than plasticity through the scoring service: each read back from ``--out``
    when its key matches and its file checks out, else scored now."""
    scores = score_criteria(names, criteria_request(opts, subject, progress=_shows_progress(opts)),
                            cache=cache, say=say)
    for n, result in scores.items():
        if n in scores.reused:
            say(f"{n}: reused {scores.reused[n].path} (same model, data and options)")
        else:
            result.meta["model"] = subject.built.name
            say(result.table())
    return scores


def _files(names) -> list[str]:
    """The files of the output set: each criterion's, then run.json."""
    return [f for n in names for f in criterion_files(n)] + ["run.json"]


def _model_name(opts: MeasureOptions) -> str:
    """The name of the model ``opts`` asks for (completed from the finetune run or model folder of
    ``--weights``; its ``--model-arg`` keywords over that run's), checked before anything is opened or
    built."""
    plan = plan_model(opts.model_request())
    FAMILIES[plan.source.kind].check_build(plan, pretrain_config=opts.pretrain_config,
                                           cache_dir=opts.cache_dir)
    return plan.source.name


def _shows_progress(opts: MeasureOptions) -> bool:
    return opts.progress if opts.progress is not None else sys.stderr.isatty()


def make_capture(net, model_name: str, opts: MeasureOptions):
    """The (not yet attached) capture of ``net`` with the protocol, pairing, components and embedding of
    ``opts``: raises ValueError when its components or embedding cannot be found, naming the options
    that name them."""
    try:
        return vitplast_kernels.capture(net, protocol=opts.protocol, pairs=opts.pairs,
                                        components=opts.components, embedding=opts.embedding)
    except ValueError as exc:
        if opts.components is not None or "no component found" not in str(exc):
            raise
        names = [n for n, _ in net.named_modules() if n][:8]
        raise ValueError(
            f"{model_name}: no preset knows its components ({type(net).__name__}); name them with "
            f"--component LABEL=GLOB (repeatable; python: components={{label: glob}}), globs over module "
            f"names such as {names}, '*' standing for the layer index, and for --protocol decomposition "
            f"--embedding NAME"
        ) from None


def _prepare(opts: MeasureOptions, model_name: str) -> Subject:
    """The datasets (opened first: a bad ``--data`` fails before any first-run digits pretraining), the
    model with its weights, initialised from ``--seed`` when random, its capture, and the datasets again
    as the model prepares its inputs (``--mean``/``--std``/``--no-model-transform`` applied)."""
    data = open_data(opts, CHECK_SIZE)  # checked (and its classes counted) before the model is built
    with torch.random.fork_rng(devices=[]):  # random initialisation from --seed: the run replays
        torch.manual_seed(opts.seed)
        built = build_model(opts.model_request(), data.x.num_classes,
                            allow_partial=opts.allow_partial_weights, cache_dir=opts.cache_dir,
                            seed=opts.seed, pretrain_config=opts.pretrain_config,
                            progress=_shows_progress(opts))
    if built.origin["kind"] == "random":
        warnings.warn(f"{built.name}: no weights given (--random-init), measuring random init; random-init "
                      "ViTs rank components almost opposite to pretrained ones", stacklevel=3)
    transform = with_overrides(built.transform, opts.transform_request())
    data = open_data(opts, built.img_size, transform, check=False)
    capture = make_capture(built.net, model_name, opts)
    device = resolve_device(opts.device)
    return Subject(built, built.net.to(device).eval(), capture, data, device, built.img_size, transform)


def _write_outputs(out_set, opts: MeasureOptions, subject: Subject, scores: Scores, record: dict, *,
                   elapsed: float, prepare_seconds: float) -> None:
    """``run.json``'s ``seconds`` are the measuring's, ``prepare_seconds`` building the model and data (a
    first-run pretraining included). The criteria's files (``plasticity.json``, ``plasticity.png``,
    ``plasticity_heatmap.png``; for any other criterion ``NAME.json``, ``.csv``, ``.txt``, ``.png``,
    ``_heatmap.png``) and ``run.json`` (what was measured, how, the reproducibility record ``record``,
    the files reused with their checksums) as one set."""
    built, names, plasticity = subject.built, tuple(opts.criterion), scores.get("plasticity")
    meta = plasticity.meta if plasticity is not None else {}
    run_info = dict(model=built.name, model_kwargs=built.timm_kwargs, weights=opts.weights,
                    pretrained=opts.pretrained, random_init=opts.random_init, data=opts.data,
                    pair_data=opts.pair_data, protocol=opts.protocol, pairs=opts.pairs,
                    batches=meta.get("batches", 0), batch_size=opts.batch_size, batch_size_unit="images",
                    device=str(subject.device), dtype=AUTOCAST_DTYPES[opts.amp], amp=opts.amp,
                    img_size=subject.img_size, seed=opts.seed, split=opts.split, seconds=round(elapsed, 3),
                    prepare_seconds=round(prepare_seconds, 3), bad_images=meta.get("bad_images", []),
                    components=opts.components, embedding=opts.embedding, model_desc=built.description,
                    transform=transform_record(subject.transform, subject.img_size), provenance=record,
                    files=_files(names), reused_files=[r.to_dict() for r in scores.reused.values()])
    if names != ("plasticity",):  # the default's run.json stays as it was
        run_info["criteria"] = {n: {"cache_key": scores.keys[n], "reused": n in scores.reused,
                                    "seconds": r.cost.seconds}
                                for n, r in scores.items() if n != "plasticity"}
        run_info.update(criterion=list(names), criterion_batches=opts.criterion_batches,
                        criterion_seeds=opts.criterion_seeds)
    with out_set.writing() as tmp:
        if plasticity is not None:
            Plasticity().write(plasticity, tmp / "plasticity.json")
            plasticity.measurement.plot(tmp / "plasticity.png")
            plasticity.measurement.plot(tmp / "plasticity_heatmap.png", kind="heatmap")  # layers x components
        for n, result in scores.items():
            if n != "plasticity":
                write_criterion(tmp, result)
        write_json_atomic(tmp / "run.json", run_info)
