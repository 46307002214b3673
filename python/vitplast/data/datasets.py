"""Image datasets for measurement and finetuning, from a one-string spec.

``load_dataset(spec, split, img_size, seed, transform=None, augment=False)`` returns a
``torch.utils.data.Dataset`` whose items are ``(image, label)``: ``image`` a float32 tensor ``(3, img_size,
img_size)``, normalised; ``label`` an int in ``[0, num_classes)``. Every dataset has ``.num_classes`` and
``.classes`` (class names, index = label).

``transform`` (a `vitplast.data.transforms.ImageTransform`, e.g. the model's own) says how images become the
model's input: image files are resized, cropped and normalised as it says, the digits normalised with its mean
and std; None is each dataset's fixed preparation (below). ``augment`` adds timm's train-time augmentation to
image files; an item addressed as ``dataset[(index, seed)]`` draws its augmentation from ``seed`` alone (the
same image, crop and flip in any process, on any resume), while ``dataset[index]`` is the image without
augmentation.

Specs:

- ``"digits"`` — scikit-learn's bundled 8x8 handwritten digits (1797 images, no download), upsampled
  (bilinear) to ``img_size``, grey repeated on 3 channels, scaled to [-1, 1] (with a ``transform``: normalised
  with its mean and std from [0, 1]). ``"digits:0-4"``, ``"digits:5-9"``, ``"digits:1,3,7"`` keep a subset of
  classes, relabelled ``0..k-1`` in increasing digit order (``.classes`` keeps the digit names). Train / val
  is a deterministic 80 / 20 split per class, drawn from ``seed``.
- ``"synthetic"`` — 4 classes of noisy random prototypes (320 train / 80 val images), for tests (already model
  inputs: no transform applies).
- ``"cifar10:DIR"`` / ``"cifar100:DIR"`` — torchvision's on-disk format under ``DIR`` (never downloaded).
- any directory — an ImageFolder (``DIR/<class>/<image>``); ``DIR/train`` and ``DIR/val`` are used when
  present, otherwise the flat folder is split 80 / 20 like digits.

Image files without a ``transform`` get `vitplast.data.transforms.fixed_transform` (shorter side resized to
``img_size``, bilinear; centre crop; ImageNet mean and std).

``split`` is ``"train"``, ``"val"`` or ``"all"`` (train + val).

An ImageFolder's files are found by `vitplast.data.folders.ImageFolder` (regular files only, each once, no
folder loop: what it skips is named in a warning) and decoded by `vitplast.data.images.open_image` (16-bit
images scaled by 65535; modes without a defined range refused by name) when an item is read; a file that
cannot be decoded (corrupt, truncated, not an image, not a regular file) raises `BadImageError` naming it, or,
with ``skip_bad_images=True``, the item is ``None``, its path is added to the dataset's ``.bad_images``, and
`make_loader`'s batches leave it out.

The dataset classes `load_dataset` returns: `TensorImageDataset` (images in memory, already prepared) and
`LabelledFiles` (image files prepared on access, with an optional augmentation drawn from each item's seed,
`seeded_draws`).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import random
from collections.abc import Sequence

import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset, default_collate

from ..runtime.resources import check_workers
from ..runtime.stops import die_with_parent
from .images import BadImageError, open_image
from .transforms import ImageTransform, fixed_transform

__all__ = ["BadImageError", "TensorImageDataset", "check_images", "load_dataset", "make_loader", "open_image"]

SPLITS = ("train", "val", "all")
VAL_FRACTION = 0.2


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


def _split_indices(labels: torch.Tensor, split: str, seed: int) -> torch.Tensor:
    """Deterministic stratified split: per class, a ``VAL_FRACTION`` share (at least 1 when the class has
    2+ items) goes to val. Returns sorted int64 indices of ``split``."""
    if split == "all":
        return torch.arange(labels.numel())
    g = torch.Generator().manual_seed(seed)
    chosen = []
    for c in torch.unique(labels).tolist():
        idx = torch.nonzero(labels == c).flatten()
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        n_val = max(int(round(idx.numel() * VAL_FRACTION)), 1 if idx.numel() >= 2 else 0)
        chosen.append(idx[:n_val] if split == "val" else idx[n_val:])
    return torch.sort(torch.cat(chosen)).values


def _parse_classes(text: str) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"1,3,7"`` -> [1, 3, 7]; mixes allowed (``"0-2,7"``)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return sorted(set(out))


def _digits(class_text: str | None, split: str, img_size: int, seed: int,
            transform: ImageTransform | None = None) -> TensorImageDataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.from_numpy(bunch.images).float()  # (1797, 8, 8), values 0..16
    labels = torch.from_numpy(bunch.target).long()
    keep = list(range(10))
    if class_text is not None:
        try:
            keep = _parse_classes(class_text)
        except ValueError:
            raise ValueError(f"spec 'digits:{class_text}': classes must look like '0-4' or '1,3,7'") from None
        if not keep or not all(0 <= c <= 9 for c in keep):
            raise ValueError(f"spec 'digits:{class_text}': digit classes must be in 0..9, got {keep}")
    mask = torch.isin(labels, torch.tensor(keep))
    images, labels = images[mask], torch.tensor([keep.index(int(c)) for c in labels[mask]], dtype=torch.long)
    idx = _split_indices(labels, split, seed)
    images, labels = images[idx], labels[idx]
    x = images.unsqueeze(1) / 16.0  # (N, 1, 8, 8) in [0, 1]
    if img_size != 8:
        x = torch.nn.functional.interpolate(x, size=(img_size,) * 2, mode="bilinear", align_corners=False)
    x = x.expand(-1, 3, -1, -1)
    x = transform.normalise(x) if transform is not None else x * 2.0 - 1.0
    return TensorImageDataset(x.contiguous(), labels, [str(c) for c in keep])


def _synthetic(split: str, img_size: int, seed: int, num_classes: int = 4, per_class: int = 100):
    """Each class = a fixed random low-frequency prototype; items = prototype + noise. The prototypes
    depend only on a fixed seed (so train and val share them); the split is drawn from ``seed``."""
    g = torch.Generator().manual_seed(1234)
    protos = torch.nn.functional.interpolate(torch.randn(num_classes, 3, 4, 4, generator=g),
                                             size=(img_size, img_size), mode="bilinear", align_corners=False)
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    images = protos[labels] + torch.randn(labels.numel(), 3, img_size, img_size, generator=g) * 0.5
    idx = _split_indices(labels, split, seed)
    return TensorImageDataset(images[idx], labels[idx], [f"class{c}" for c in range(num_classes)])


def _file_transforms(img_size: int, transform: ImageTransform | None, augment: bool):
    """``(transform, augmentation)`` of image files: ``transform`` at ``img_size`` (None: the fixed one),
    and its train-time augmentation when ``augment`` (else None)."""
    tf = (transform or fixed_transform(img_size)).resized(img_size)
    return tf.image_transform(), (tf.image_transform(augment=True) if augment else None)


def _cifar(kind: str, root: str, split: str, img_size: int, transform: ImageTransform | None = None,
           augment: bool = False) -> Dataset:
    from torchvision import datasets

    cls = datasets.CIFAR10 if kind == "cifar10" else datasets.CIFAR100
    folder = cls.base_folder  # "cifar-10-batches-py" / "cifar-100-python"
    root = os.path.expanduser(root)
    if os.path.basename(os.path.normpath(root)) == folder:  # DIR given as the extracted folder itself
        root = os.path.dirname(os.path.normpath(root))
    transforms = _file_transforms(img_size, transform, augment)
    parts = []
    for train in ([True, False] if split == "all" else [split == "train"]):
        try:
            parts.append(cls(root=root, train=train, download=False))
        except RuntimeError as exc:
            raise FileNotFoundError(
                f"{kind} not found under {root!r}: expected the python-version archive extracted as "
                f"{os.path.join(root, folder)}/ (get {cls.filename} from the CIFAR page and run "
                f"`tar xzf {cls.filename} -C {root}`); nothing is downloaded") from exc
    ds = parts[0] if len(parts) == 1 else ConcatDataset(parts)
    return LabelledFiles(ds, parts[0].classes, False, *transforms)


def _image_folder(root: str, split: str, img_size: int, seed: int, skip_bad: bool = False,
                  transform: ImageTransform | None = None, augment: bool = False) -> Dataset:
    from .folders import ImageFolder  # heavy: torchvision, loaded only for image folders

    transforms = _file_transforms(img_size, transform, augment)
    train_dir, val_dir = os.path.join(root, "train"), os.path.join(root, "val")
    if os.path.isdir(train_dir) and os.path.isdir(val_dir):
        dirs = {"train": [train_dir], "val": [val_dir], "all": [train_dir, val_dir]}[split]
        parts = [ImageFolder(d, loader=open_image) for d in dirs]
        if len(parts) == 2 and parts[0].classes != parts[1].classes:
            raise ValueError(f"{train_dir} and {val_dir} hold different class folders: "
                             f"{parts[0].classes} vs {parts[1].classes}")
        ds = parts[0] if len(parts) == 1 else ConcatDataset(parts)
        return LabelledFiles(ds, parts[0].classes, skip_bad, *transforms)
    try:
        full = ImageFolder(root, loader=open_image)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"no images found in {root!r}: an ImageFolder needs DIR/<class>/<image> "
                                f"(or DIR/train/<class>/... and DIR/val/<class>/...)") from exc
    subset = Subset(full, _split_indices(torch.tensor(full.targets, dtype=torch.long), split, seed).tolist())
    return LabelledFiles(subset, full.classes, skip_bad, *transforms)


def load_dataset(spec: str, split: str = "train", img_size: int = 32, seed: int = 0,
                 skip_bad_images: bool = False, transform: ImageTransform | None = None,
                 augment: bool = False) -> Dataset:
    """The dataset named by ``spec`` (see the module docstring).

    Items are ``(image, label)``: ``image`` float32 ``(3, img_size, img_size)`` normalised (as ``transform``
    says; None: the fixed preparation), ``label`` int; ``augment``: train-time augmentation of image files.
    The returned dataset has ``.num_classes`` (int) and ``.classes`` (list of names, index = label).
    Raises ``ValueError`` for an unknown spec or split, ``FileNotFoundError`` for missing files.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"spec must be a non-empty string, got {spec!r}")
    if not isinstance(img_size, int) or img_size < 1:
        raise ValueError(f"img_size must be a positive int, got {img_size!r}")
    kind, _, arg = spec.partition(":")
    if kind == "digits":
        return _digits(arg or None, split, img_size, seed, transform)
    if kind == "synthetic":
        if arg:
            raise ValueError(f"spec 'synthetic' takes no argument, got {spec!r}")
        return _synthetic(split, img_size, seed)
    if kind in ("cifar10", "cifar100"):
        if not arg:
            raise ValueError(f"spec {kind!r} needs a directory: '{kind}:DIR'")
        return _cifar(kind, arg, split, img_size, transform, augment)
    path = os.path.expanduser(spec)
    if os.path.isdir(path):
        return _image_folder(path, split, img_size, seed, skip_bad_images, transform, augment)
    raise ValueError(f"unknown dataset spec {spec!r}: expected 'digits', 'digits:0-4', 'synthetic', "
                     "'cifar10:DIR', 'cifar100:DIR' or an existing ImageFolder directory")


def make_loader(dataset: Dataset, batch_size: int, shuffle: bool = True, seed: int = 0,
                drop_last: bool = False, num_workers: int = 0) -> DataLoader:
    """A ``DataLoader`` over ``dataset`` whose order depends only on ``seed`` (own generator).

    Batches are ``(images (b, 3, H, W) float32, labels (b,) int64)``; over a dataset that skips bad
    images, a batch holds only the good ones (fewer than ``batch_size``; ``None`` when none is good).
    ``num_workers`` loading processes (at most the CPUs this process may use; ValueError naming
    ``--workers`` beyond) die with this process.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    check_workers(num_workers)
    g = torch.Generator().manual_seed(seed)
    collate = _collate_present if getattr(dataset, "skip_bad_images", False) else None
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=g, drop_last=drop_last,
                      num_workers=num_workers, collate_fn=collate,
                      worker_init_fn=_loader_worker_init if num_workers else None)


def first_batches(dataset: Dataset, batch_size: int, count: int, seed: int) -> list:
    """The first ``count`` batches ``(images, labels)`` of `make_loader` over ``dataset`` (shuffled by
    ``seed``); a batch of only bad images is skipped (fewer batches than ``count`` when the loader ends
    first)."""
    batches = (item for item in make_loader(dataset, batch_size, shuffle=True, seed=seed) if item is not None)
    return list(itertools.islice(batches, count))


def _loader_worker_init(worker_id: int) -> None:
    """A data-loading process dies with the process it loads for (no worker outlives its command)."""
    die_with_parent()


def _collate_present(items: list):
    """Default collation of the items that are not ``None`` (skipped bad images); ``None`` when none is."""
    items = [x for x in items if x is not None]
    return default_collate(items) if items else None


def _file_of(dataset, idx: int) -> str | None:
    """The image file behind item ``idx`` (through ``LabelledFiles``, ``Subset`` and ``ConcatDataset``), or
    None for in-memory data."""
    while True:
        if isinstance(dataset, LabelledFiles):
            dataset = dataset.inner
        elif isinstance(dataset, Subset):
            dataset, idx = dataset.dataset, int(dataset.indices[idx])
        elif isinstance(dataset, ConcatDataset):
            part = bisect.bisect_right(dataset.cumulative_sizes, idx)
            idx -= dataset.cumulative_sizes[part - 1] if part else 0
            dataset = dataset.datasets[part]
        else:
            samples = getattr(dataset, "samples", None)
            return samples[idx][0] if samples is not None else None


def check_images(dataset, batches: int, batch_size: int, seed: int) -> int:
    """Decodes the image files of the first ``batches`` batches `make_loader` gives (``shuffle``,
    ``seed``, full batches): the ones a run will read, checked before it starts. Raises
    `BadImageError` naming the first file that cannot be decoded; returns the files checked."""
    # the same loader over the items' indices: the same draws from the same generator, the same order
    loader = make_loader(range(len(dataset)), batch_size=batch_size, shuffle=True, seed=seed, drop_last=True)
    paths = [_file_of(dataset, i) for idx in itertools.islice(loader, batches) for i in idx.tolist()]
    for path in filter(None, paths):
        open_image(path)
    return sum(path is not None for path in paths)
