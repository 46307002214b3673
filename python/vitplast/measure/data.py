"""The images ``vitplast measure`` pairs: the datasets its options name (`open_data`), the forward passes'
inputs in pairing order (`MeasureData.stream`) and how many full batches they hold (`batches_to_run`)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from vitplast.data.datasets import check_images, load_dataset, make_loader

from .options import MeasureOptions


def _batches(dataset, n_images: int, seed: int, workers: int = 0):
    """Image tensors of up to ``n_images`` images, shuffled by ``seed`` (a batch may come short, or be
    skipped, when bad images are skipped); ``workers`` processes decode them."""
    for batch in make_loader(dataset, batch_size=n_images, shuffle=True, seed=seed, drop_last=True,
                             num_workers=workers):
        yield None if batch is None else batch[0]


@dataclasses.dataclass(frozen=True)
class MeasureData:
    """The datasets of one measurement: ``x`` (``--data``) and, for matched pairs, ``y``
    (``--pair-data``; None: pairs within ``x``)."""

    x: Any
    y: Any | None
    workers: int = 0

    def sizes(self) -> str:
        return f"{len(self.x)}" if self.y is None else f"{len(self.x)} / {len(self.y)}"

    def describe(self, opts: MeasureOptions) -> str:
        if self.y is None:
            return f"within {opts.data!r} ({len(self.x)} images)"
        return (f"matched, X from {opts.data!r} ({len(self.x)} images) with Y from {opts.pair_data!r} "
                f"({len(self.y)} images)")

    def bad_images(self) -> list[str]:
        """The image files skipped so far (``--skip-bad-images``), sorted."""
        return sorted({*getattr(self.x, "bad_images", []), *getattr(self.y, "bad_images", [])})

    def stream(self, batch_size: int, seed: int) -> Iterator:
        """Forward-pass inputs: ``(2k,)`` halves of ``x``, or ``cat([X[:k], Y[:k]])``; batches cut short
        by skipped images are trimmed to keep the pairing, empty ones dropped."""
        if self.y is None:
            for xb in _batches(self.x, batch_size, seed, self.workers):
                n = 0 if xb is None else xb.shape[0] - xb.shape[0] % 2
                if n >= 2:
                    yield xb[:n]
            return
        for xb, yb in zip(_batches(self.x, batch_size // 2, seed, self.workers),
                          _batches(self.y, batch_size // 2, seed + 1, self.workers), strict=False):
            k = 0 if xb is None or yb is None else min(xb.shape[0], yb.shape[0])
            if k >= 1:
                yield torch.cat([xb[:k], yb[:k]])

    def check_images(self, batches: int, batch_size: int, seed: int) -> None:
        """Decodes the image files the first ``batches`` batches of `stream` read."""
        if self.y is None:
            check_images(self.x, batches, batch_size, seed)
        else:
            check_images(self.x, batches, batch_size // 2, seed)
            check_images(self.y, batches, batch_size // 2, seed + 1)


def open_data(opts: MeasureOptions, img_size: int, transform=None, *, check: bool = True) -> MeasureData:
    """The datasets of ``opts`` at ``img_size``, prepared by ``transform`` (a
    `vitplast.data.transforms.ImageTransform`; None: the fixed preparation); with ``check`` (and
    without ``--skip-bad-images``) the image files the run reads are decoded first, so a bad one stops it
    before any work."""
    def load(spec: str):
        return load_dataset(spec, opts.split, img_size=img_size, seed=opts.seed,
                            skip_bad_images=opts.skip_bad_images, transform=transform)

    data = MeasureData(load(opts.data), load(opts.pair_data) if opts.pair_data else None, opts.workers)
    if check and not opts.skip_bad_images:
        data.check_images(opts.batches, opts.batch_size, opts.seed)
    return data


def batches_to_run(opts: MeasureOptions, data: MeasureData) -> int:
    """``--batches``, or fewer (with a warning) when the data holds fewer full batches; ValueError when
    it holds none."""
    # the images the pairing can draw: all of x, or as many of y as of x
    usable = len(data.x) if data.y is None else min(len(data.x), len(data.y)) * 2
    available = usable // opts.batch_size
    if available < 1:
        raise ValueError(f"batch_size={opts.batch_size} images: the data holds too few images for one batch "
                         f"({data.sizes()})")
    if available < opts.batches:
        warnings.warn(f"batches={opts.batches}: the data holds only {available} full batches of "
                      f"{opts.batch_size} images; measuring {available}", stacklevel=3)
    return min(opts.batches, available)
