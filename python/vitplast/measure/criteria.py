"""What ``vitplast measure`` hands the scoring service (`vitplast.criteria.score_criteria`): the cache
in ``--out`` (`out_cache`: the model's provenance, the data and options each criterion's key holds),
the requests (`plasticity_request`: the measured model and its capture over the paired images;
`criteria_request`: each seed's model as its finetuning run starts it, the labelled sample), and the
files each criterion writes (`criterion_files`, `write_criterion`)."""

from __future__ import annotations

from pathlib import Path

from vitplast.criteria import ScoreCache, ScoringRequest, resolve_units
from vitplast.criteria.service import labelled_sample, seeded_models
from vitplast.models.builder import build_model
from vitplast.models.families import family_of
from vitplast.runtime.precision import autocast

from .options import MeasureOptions

# what a criterion writes beside run.json (plasticity writes the PlasticityResult's files instead)
SUFFIXES = (".json", ".csv", ".txt", ".png", "_heatmap.png")
PLASTICITY_FILES = ("plasticity.json", "plasticity.png", "plasticity_heatmap.png")


def criterion_files(name: str) -> tuple[str, ...]:
    """The files criterion ``name`` writes."""
    return PLASTICITY_FILES if name == "plasticity" else tuple(f"{name}{s}" for s in SUFFIXES)


def out_cache(opts: MeasureOptions, record: dict, device, img_size: int):
    """The `vitplast.criteria.ScoreCache` of ``--out``: ``record`` (the measured model's provenance),
    the options every score depends on, and what draws the labelled sample and the pairs."""
    return ScoreCache(
        opts.out, record, context={"components": opts.components, "amp": opts.amp, "device": str(device),
                                   "split": opts.split},
        inputs={"images": {"criterion_batches": opts.criterion_batches, "batch_size": opts.batch_size,
                           "seed": opts.seed},
                "pairs": {"batches": opts.batches, "batch_size": opts.batch_size, "seed": opts.seed,
                          "img_size": img_size}})


def plasticity_request(opts: MeasureOptions, subject, *, limit: int, progress: bool, say, on_error):
    """The `vitplast.criteria.ScoringRequest` of plasticity: the measured model and its capture, up to
    ``limit`` forward passes of the paired images (``say`` tells the pairing when they are drawn)."""
    def pair_batches():
        per = opts.batch_size // 2 if opts.pairs == "halves" else opts.batch_size * (opts.batch_size - 1) // 2
        say(f"pairs: {opts.pairs}, {subject.data.describe(opts)}; {opts.batch_size} images per batch "
            f"({per} pairs)")
        stream = subject.data.stream(opts.batch_size, opts.seed)
        return (b.to(subject.device, non_blocking=True) for b in stream)

    options = {"protocol": opts.protocol, "pairs": opts.pairs, "embedding": opts.embedding, "limit": limit,
               "desc": f"measuring ({opts.protocol})", "on_error": on_error,
               "make_capture": lambda net: subject.capture}
    return ScoringRequest(lambda seed: subject.net, resolve_units(subject.net, opts.components),
                          pair_batches=pair_batches, seeds=(opts.seed,), components=opts.components,
                          device=subject.device, amp=autocast(opts.amp, subject.device), options=options,
                          progress=progress)


def criteria_request(opts: MeasureOptions, subject, *, progress: bool):
    """The `vitplast.criteria.ScoringRequest` of the other criteria: each seed's model as a finetuning
    run of that seed starts it (rebuilt with that seed drawing its head, so the head is the run's; the
    seeds of the loss-based criteria: ``--criterion-seeds``, else ``--seed``), the first
    ``--criterion-batches`` labelled batches of the downstream data (``--pair-data`` when given, else
    ``--data``) in the order ``--seed`` draws."""
    downstream = subject.data.y if subject.data.y is not None else subject.data.x
    classes = downstream.num_classes

    def build():
        built = build_model(opts.model_request(), classes, allow_partial=opts.allow_partial_weights,
                            cache_dir=opts.cache_dir, seed=opts.seed, pretrain_config=opts.pretrain_config)
        if family_of(built.name).keeps_pretraining_head:  # a finetuning run replaces it
            built.net.reset_classifier(classes)
        return built.net

    def batches():
        return labelled_sample(downstream, batch_size=opts.batch_size, count=opts.criterion_batches,
                               seed=opts.seed, device=subject.device, what="the data")

    return ScoringRequest(seeded_models(build, subject.device), resolve_units(subject.net, opts.components),
                          batches=batches, components=opts.components,
                          seeds=tuple(opts.criterion_seeds) if opts.criterion_seeds else (opts.seed,),
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
