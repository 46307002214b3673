"""``measure(...)``: the measurement behind ``vitplast measure`` (see that module for the command line).

Order of work: every argument is checked, then ``out`` (it must be able to receive the output set),
then the datasets are opened and the model built with its weights and components; only then do the
forward passes run. The output set (``plasticity.json``, ``plasticity.png``, ``run.json``) is written as
a unit (:mod:`vitplast.runs.output_set`).
"""

from __future__ import annotations

import dataclasses
import time
import warnings

from ..runtime.device import resolve_device
from ..options.fields import resolve
from .options import DEFAULT_DATA, DEFAULT_PAIR_DATA, MeasureOptions

OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(MeasureOptions))
OUTPUT_FILES = ("plasticity.json", "plasticity.png", "run.json")


def _batches(dataset, n_images: int, seed: int):
    """Image tensors of up to ``n_images`` images, shuffled by ``seed`` (a batch may come short, or be
    skipped, when bad images are skipped)."""
    from vitplast.data.datasets import make_loader

    for batch in make_loader(dataset, batch_size=n_images, shuffle=True, seed=seed, drop_last=True):
        yield None if batch is None else batch[0]


def _paired_stream(x_set, y_set, batch_size: int, seed: int):
    """Forward-pass inputs: ``(2k,)`` halves of one dataset, or ``cat([X[:k], Y[:k]])`` of two; batches
    cut short by skipped images are trimmed to keep the pairing, empty ones dropped."""
    import torch

    if y_set is None:
        for xb in _batches(x_set, batch_size, seed):
            n = 0 if xb is None else xb.shape[0] - xb.shape[0] % 2
            if n >= 2:
                yield xb[:n]
        return
    for xb, yb in zip(_batches(x_set, batch_size // 2, seed), _batches(y_set, batch_size // 2, seed + 1),
                      strict=False):
        k = 0 if xb is None or yb is None else min(xb.shape[0], yb.shape[0])
        if k >= 1:
            yield torch.cat([xb[:k], yb[:k]])


def _check_images(x_set, y_set, batches: int, batch_size: int, seed: int) -> None:
    """Decodes the image files the first ``batches`` batches of :func:`_paired_stream` read."""
    from vitplast.data.datasets import check_images

    if y_set is None:
        check_images(x_set, batches, batch_size, seed)
    else:
        check_images(x_set, batches, batch_size // 2, seed)
        check_images(y_set, batches, batch_size // 2, seed + 1)


def _autocast(device, dtype_name: str):
    import contextlib

    import torch

    if dtype_name == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, dtype_name))


def measure(model: str | None = None, weights: str | None = None, data: str | None = None,
            pair_data: str | None = None, protocol: str | None = None, pairs: str | None = None,
            batches: int | None = None, batch_size: int | None = None, device: str | None = None,
            dtype: str | None = None, img_size: int | None = None, seed: int | None = None,
            split: str | None = None, out: str | None = None, cache_dir: str | None = None,
            pretrain_config: dict | None = None, progress: bool | None = None, components: dict | None = None,
            embedding: str | None = None, allow_partial_weights: bool | None = None,
            skip_bad_images: bool | None = None, log=print):
    """Measure a model's plasticity; returns the ``vitplast_kernels`` ``PlasticityResult``.

    Every keyword is the option of ``vitplast measure`` with that name (None: its default; defaults
    and checks in :class:`vitplast.measure.options.MeasureOptions`).

    ``model=None`` -> the embedded digits ViT, or the architecture of the ``vitplast finetune`` run that
    wrote ``weights``; ``data=None`` -> ``"digits:0-4"`` matched with ``pair_data="digits:5-9"``. Each
    of the ``batches`` forward passes sees ``batch_size`` images: ``batch_size / 2`` pairs with
    ``pairs="halves"`` or matched data, every distinct pair of the batch with ``pairs="all"``.
    ``components``/``embedding``: the capture's (any model; default: the presets). ``out``: a
    directory receiving ``plasticity.json``, ``plasticity.png`` and ``run.json`` as one set.
    ``log``: where the summary lines go (``None`` for silence).
    """
    import torch
    from tqdm.auto import tqdm

    import vitplast_kernels
    from vitplast.data.datasets import load_dataset
    from vitplast.models.builder import (
        DIGITS_MODEL,
        build_model,
        check_digits_options,
        default_img_size,
        resolve_architecture,
    )
    from vitplast.runs.output_set import OutputSet
    from vitplast.runs.rundir import write_json_atomic

    from .model import make_capture

    log = log or (lambda *a, **k: None)
    o = resolve(MeasureOptions, {k: v for k, v in locals().items() if k in OPTION_NAMES})
    (model, weights, data, pair_data, protocol, pairs, batches, batch_size, dtype, img_size, seed, split, out,
     cache_dir, pretrain_config, progress, components, embedding, allow_partial_weights, skip_bad_images) = (
        o.model, o.weights, o.data, o.pair_data, o.protocol, o.pairs, o.batches, o.batch_size, o.dtype,
        o.img_size, o.seed, o.split, o.out, o.cache_dir, o.pretrain_config, o.progress, o.components,
        o.embedding, o.allow_partial_weights, o.skip_bad_images)
    dev = resolve_device(o.device)
    out_set = None
    if out is not None:
        out_set = OutputSet(out, OUTPUT_FILES)
        out_set.check()
    if data is None:
        data = DEFAULT_DATA
        if pair_data is None:
            pair_data = DEFAULT_PAIR_DATA

    start = time.perf_counter()
    name, timm_kwargs, img_size = resolve_architecture(model, weights, img_size)
    if name == DIGITS_MODEL:
        img_size = check_digits_options(timm_kwargs, img_size, pretrain_config)
        if weights is None:  # it will be pretrained into the cache unless there already
            from vitplast.models.digits import check_cache_dir

            check_cache_dir(cache_dir)
    else:
        img_size = img_size or default_img_size(name)

    def open_sets(size: int):
        x = load_dataset(data, split, img_size=size, seed=seed, skip_bad_images=skip_bad_images)
        y = load_dataset(pair_data, split, img_size=size, seed=seed, skip_bad_images=skip_bad_images) \
            if pair_data else None
        return x, y

    # datasets before the model: a bad --data fails before any (first-run digits) pretraining
    x_set, y_set = open_sets(img_size)
    if not skip_bad_images:  # the image files this run reads decode: checked before any work
        _check_images(x_set, y_set, batches, batch_size, seed)
    with torch.random.fork_rng(devices=[]):  # random initialisation from --seed: the run replays
        torch.manual_seed(seed)
        built = build_model(name, x_set.num_classes, weights=weights, model_kwargs=timm_kwargs,
                            img_size=img_size,
                            allow_partial=allow_partial_weights, cache_dir=cache_dir, seed=seed,
                            pretrain_config=pretrain_config, progress=progress)
    if built.img_size != img_size:
        img_size = built.img_size
        x_set, y_set = open_sets(img_size)
    acts = make_capture(built.net, name, protocol=protocol, pairs=pairs, components=components,
                           embedding=embedding)
    net = built.net.to(dev).eval()
    log(f"model: {built.description}, {sum(p.numel() for p in net.parameters()) / 1e6:.2f} M parameters")
    n_x = len(x_set) if y_set is None else min(len(x_set), len(y_set)) * 2
    available = n_x // batch_size
    if available < 1:
        raise ValueError(f"batch_size={batch_size} images: the data holds too few images for one batch "
                         f"({len(x_set)}{'' if y_set is None else f' / {len(y_set)}'})")
    if available < batches:
        warnings.warn(f"batches={batches}: the data holds only {available} full batches of {batch_size} "
                      f"images; measuring {available}", stacklevel=2)
    n_run = min(batches, available)
    per = batch_size // 2 if pairs == "halves" else batch_size * (batch_size - 1) // 2
    source = (f"within {data!r} ({len(x_set)} images)" if y_set is None else
              f"matched, X from {data!r} ({len(x_set)} images) with Y from {pair_data!r} "
              f"({len(y_set)} images)")
    log(f"pairs: {pairs}, {source}; {batch_size} images per batch ({per} pairs)")

    measured = 0
    with acts, torch.no_grad(), _autocast(dev, dtype):
        stream = _paired_stream(x_set, y_set, batch_size, seed)
        for batch in tqdm(stream, total=n_run, desc=f"measuring ({protocol})", disable=not progress,
                          unit="batch"):
            try:
                net(batch.to(dev, non_blocking=True))
            except (RuntimeError, AssertionError) as exc:
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ValueError(f"{name}: the forward pass failed on {tuple(batch.shape)} images "
                                 f"(--img-size {img_size}?): {text[:300]}") from None
            measured += 1
            if measured == n_run:
                break
    bad = sorted({*getattr(x_set, "bad_images", []), *getattr(y_set, "bad_images", [])})
    if bad:
        warnings.warn(f"skipped {len(bad)} unreadable image(s): {', '.join(bad[:5])}"
                      f"{' ...' if len(bad) > 5 else ''}", stacklevel=2)
    if measured == 0:
        raise ValueError("no batch was measured: every batch lost its images to --skip-bad-images")
    res = vitplast_kernels.pairwise_plasticity(acts)
    elapsed = time.perf_counter() - start

    log(res.table())  # ends with the ranking line
    log(f"({measured} batches x {batch_size} images, {protocol}, {dtype} on {dev}, {elapsed:.1f} s"
        f"{f'; {len(bad)} bad images skipped' if bad else ''})")
    if out_set is not None:
        run_info = dict(model=built.name, model_kwargs=built.timm_kwargs, weights=weights, data=data,
                        pair_data=pair_data, protocol=protocol, pairs=pairs, batches=measured,
                        batch_size=batch_size, batch_size_unit="images", device=str(dev), dtype=dtype,
                        img_size=img_size, seed=seed, split=split, seconds=round(elapsed, 3),
                        model_desc=built.description, components=components, embedding=embedding,
                        bad_images=bad, files=list(OUTPUT_FILES))
        with out_set.writing() as tmp:
            res.to_json(tmp / "plasticity.json")
            res.plot(tmp / "plasticity.png")
            write_json_atomic(tmp / "run.json", run_info)
        log(f"wrote {', '.join(str(out_set.target / f) for f in OUTPUT_FILES)}")
    return res
