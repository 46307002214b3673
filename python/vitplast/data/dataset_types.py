"""The dataset classes `vitplast.data.datasets.load_dataset` returns: `TensorImageDataset` (images in
memory, already prepared) and `LabelledFiles` (image files prepared on access, with an optional
augmentation drawn from each item's seed, `seeded_draws`)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence

import torch
from torch.utils.data import Dataset

from .images import BadImageError


class TensorImageDataset(Dataset):
    """Images held in memory.

    ``images``: float32 ``(N, 3, H, W)``, already normalised; ``labels``: int64 ``(N,)``.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, classes: Sequence[str]):
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images must have shape (N, 3, H, W), got {tuple(images.shape)}")
        if labels.shape != (images.shape[0],):
            raise ValueError(f"labels must have shape ({images.shape[0]},), got {tuple(labels.shape)}")
        self.images, self.labels, self.classes = images.contiguous(), labels.long(), list(classes)
        self.num_classes = len(self.classes)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, int]:
        return self.images[idx], int(self.labels[idx])


@contextlib.contextmanager
def seeded_draws(seed: int):
    """The torch (CPU) and python generators seeded from ``seed`` inside, restored after: an item's
    random augmentation then depends on ``seed`` alone."""
    state = random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            random.setstate(state)


class LabelledFiles(Dataset):
    """A dataset (or subset/concat of one) of undecoded images that exposes ``.classes`` and
    ``.num_classes`` and prepares each image with ``transform``; with ``skip_bad_images`` an undecodable
    image gives the item ``None`` and its path in ``.bad_images``. With an ``augmentation`` (then
    ``.augmented``), ``dataset[(index, seed)]`` prepares the image with it, its random draws taken from
    ``seed``, while ``dataset[index]`` stays the plain preparation: one dataset serves the training steps
    and the evaluation of held-out training images."""

    def __init__(self, inner: Dataset, classes: Sequence[str], skip_bad_images: bool = False,
                 transform=None, augmentation=None):
        self.inner, self.classes, self.skip_bad_images = inner, list(classes), skip_bad_images
        self.num_classes = len(self.classes)
        self.transform, self.augmentation = transform, augmentation
        self.augmented = augmentation is not None
        self.bad_images: list[str] = []

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, idx):
        if isinstance(idx, tuple):
            index, seed = idx
            with seeded_draws(int(seed)):
                return self._prepared(int(index), self.augmentation or self.transform)
        return self._prepared(idx, self.transform)

    def _prepared(self, idx: int, transform):
        try:
            image, label = self.inner[idx]
        except BadImageError as exc:
            if not self.skip_bad_images:
                raise
            if exc.path not in self.bad_images:
                self.bad_images.append(exc.path)
            return None
        return (image if transform is None else transform(image)), int(label)
