"""Data of a finetuning run: the training batches as a pure function of (seed, iteration), the datasets, the
part of the training images ``--holdout`` keeps out of training, the fixed probe batch of ``--probe`` and the
validation pass.

``--holdout F`` splits the training set once, by a permutation drawn from the fixed `HOLDOUT_SEED`:
``round(F * n)`` of its ``n`` images are held out (never trained on; evaluated without augmentation at the end
of the run, ``holdout_acc``), the others are the training set. The split depends on ``n`` and ``F`` only,
never on the run's seed, lr or ``--train``: every run that sees the same training set holds out the same
images (in a claim, every train and lr of a seed, so that learning rates are chosen on one validation set; on
data whose train/val split is fixed, every run), in any process and on resume."""

from __future__ import annotations

import contextlib

import torch

from ..data.datasets import load_dataset
from ..options.groups import DataOptions
from ..runtime.distributed import DistContext

HOLDOUT_SEED = 1_000_033  # the --holdout split's permutation: the same in every run


def holdout_split(n: int, fraction: float, data: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """``(kept, held)``: sorted int64 positions of a training set of ``n`` images, ``round(fraction * n)`` of
    them held out by a permutation drawn from `HOLDOUT_SEED` (``fraction`` 0: all kept). ValueError naming
    ``--holdout`` when either part would be empty (``data``: the ``--data`` spec, for the message)."""
    if not fraction:
        return torch.arange(n), torch.zeros(0, dtype=torch.long)
    held = round(fraction * n)
    if held == 0 or held == n:
        empty = "held-out part" if held == 0 else "training part"
        raise ValueError(f"--holdout {fraction:g}: holds out {held} of the {n} training images of --data "
                         f"{data} (the {empty} would be empty); give a fraction that leaves images on both "
                         "sides")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(HOLDOUT_SEED))
    return torch.sort(perm[held:]).values, torch.sort(perm[:held]).values


def _tensors(dataset) -> tuple[torch.Tensor, torch.Tensor] | None:
    """An in-memory dataset's ``(images, labels)`` tensors (indexed directly), else None."""
    images, labels = getattr(dataset, "images", None), getattr(dataset, "labels", None)
    return (images, labels) if isinstance(images, torch.Tensor) and isinstance(labels, torch.Tensor) else None


def _stack(items) -> tuple[torch.Tensor, torch.Tensor]:
    """Items ``(image, label)`` as one batch of images and one of labels."""
    return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items], dtype=torch.long)


class Positions(torch.utils.data.Dataset):
    """Items ``positions`` of ``dataset`` (a part of a training set), keyed as ``dataset`` is (an index, or
    ``(index, seed)`` for an augmented dataset), with its ``classes``; an in-memory dataset's ``images`` and
    ``labels`` are kept as tensors of those rows (`StepBatches` indexes them directly)."""

    def __init__(self, dataset, positions: torch.Tensor) -> None:
        self.dataset, self.positions = dataset, positions
        self.augmented = getattr(dataset, "augmented", False)
        self.classes, self.num_classes = dataset.classes, dataset.num_classes
        if (tensors := _tensors(dataset)) is not None:
            self.images, self.labels = (t[positions] for t in tensors)

    def __len__(self) -> int:
        return self.positions.numel()

    def __getitem__(self, key):
        if isinstance(key, tuple):
            index, seed = key
            return self.dataset[(int(self.positions[index]), seed)]
        return self.dataset[int(self.positions[key])]


def item_seed(seed: int, it: int, position: int) -> int:
    """The seed of the augmentation of the image at ``position`` of iteration ``it``'s global batch."""
    return (seed * 1_000_003 + it) * 65_537 + position


class StepBatches:
    """Global batch of iteration ``it`` as a pure function of ``(seed, it)``: epoch ``e`` visits the training
    set in ``randperm(seed, e)`` order, incomplete last batches are dropped. Rank ``r`` of ``w`` takes
    sequences ``r, r + w, ...`` of the global batch, so the data order needs no saving beyond the iteration
    number, and a resumed run sees exactly the batches it would have seen; an augmented dataset's images draw
    their augmentation from ``(seed, it, position)`` alike."""

    def __init__(self, dataset, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        self.rank, self.world = rank, world
        self.n = len(dataset)
        if batch_size > self.n:
            raise ValueError(f"--batch-size {batch_size} exceeds the training set ({self.n} images)")
        if batch_size % world:
            raise ValueError(f"--batch-size {batch_size} must be divisible by the {world} processes")
        self.per_epoch = self.n // batch_size
        self._perm_epoch, self._perm = -1, None
        self._tensors = _tensors(dataset)

    def indices(self, it: int) -> torch.Tensor:
        epoch, k = divmod(it, self.per_epoch)
        if epoch != self._perm_epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm, self._perm_epoch = torch.randperm(self.n, generator=g), epoch
        return self._perm[k * self.batch_size : (k + 1) * self.batch_size][self.rank :: self.world]

    def keys(self, it: int) -> list:
        """The dataset keys of this rank's share of iteration ``it``: indices, or ``(index, seed)`` pairs for
        an augmented dataset."""
        idx = self.indices(it).tolist()
        if not getattr(self.dataset, "augmented", False):
            return idx
        positions = range(self.rank, self.batch_size, self.world)
        return [(i, item_seed(self.seed, it, p)) for i, p in zip(idx, positions, strict=True)]

    def get(self, it: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._tensors is not None:
            idx = self.indices(it)
            return tuple(t[idx] for t in self._tensors)
        return _stack([self.dataset[k] for k in self.keys(it)])

    def iterate(self, start: int, stop: int, workers: int = 0):
        """``(it, images, labels)`` for ``it`` in ``[start, stop)``; ``workers`` > 0 loads ahead."""
        if workers == 0 or self._tensors is not None:
            for it in range(start, stop):
                yield (it, *self.get(it))
            return
        from torch.utils.data import DataLoader

        sampler = [self.keys(it) for it in range(start, stop)]
        loader = DataLoader(self.dataset, batch_sampler=sampler, num_workers=workers)
        for it, (x, y) in zip(range(start, stop), loader, strict=True):
            yield it, x, y


def evaluate(model, dataset, device, *, limit=0, batch_size=256, dctx=None, amp=contextlib.nullcontext):
    """``(accuracy, mean loss)`` on ``dataset`` (first ``limit`` items when > 0), summed over ranks."""
    dctx = dctx or DistContext()
    was, tensors = model.training, _tensors(dataset)
    idx = torch.arange(dctx.rank, min(limit, len(dataset)) if limit else len(dataset), dctx.world)
    model.eval()
    tot = torch.zeros(3, dtype=torch.float64, device=device)  # correct, count, loss sum
    with torch.no_grad():
        for part in (idx[s : s + batch_size] for s in range(0, idx.numel(), batch_size)):
            x, y = tuple(t[part] for t in tensors) if tensors else _stack([dataset[int(i)] for i in part])
            with amp():
                logits = model(x.to(device)).float()
            y = y.to(device)
            tot[0] += (logits.argmax(-1) == y).sum()
            tot[1] += y.numel()
            tot[2] += torch.nn.functional.cross_entropy(logits, y, reduction="sum").double()
    model.train(was)
    correct, count, loss = dctx.sum_(tot).tolist()
    return (correct / count, loss / count) if count else (float("nan"), float("nan"))


def load_data(opts: DataOptions, seed: int, img_size: int, transform=None):
    """``(train, val, holdout)`` datasets of ``--data`` at ``img_size``, prepared by ``transform`` (a
    `vitplast.data.transforms.ImageTransform`; None: the fixed preparation), the training images augmented
    unless ``--no-augment``. With ``--holdout``, ``train`` is the part not held out and ``holdout`` the
    held-out part (`holdout_split`: ValueError naming ``--holdout`` when a part would be empty), addressed by
    plain indices and so prepared as the validation images are, without augmentation; without it ``holdout``
    is None."""
    train = load_dataset(opts.data, "train", img_size=img_size, seed=seed, transform=transform,
                         augment=opts.augment)
    val = load_dataset(opts.data, "val", img_size=img_size, seed=seed, transform=transform)
    if not opts.holdout:
        return train, val, None
    kept, held = holdout_split(len(train), opts.holdout, opts.data)
    return Positions(train, kept), val, Positions(train, held)


def probe_batch(train_ds, n: int, dctx: DistContext, device) -> torch.Tensor:
    """``--probe N``: N training images drawn once with a fixed seed (the same in every run), this rank's
    share of them on ``device``; pairs are its halves, so the share must be even."""
    g = torch.Generator().manual_seed(12345)
    pick = torch.randperm(len(train_ds), generator=g)[:n]
    if pick.numel() < n:
        raise ValueError(f"--probe {n} exceeds the training set ({len(train_ds)} images)")
    augmented = getattr(train_ds, "augmented", False)  # an image's random augmentation drawn from its seed
    keys = [(int(i), 12345 + k) if augmented else int(i) for k, i in enumerate(pick)]
    probe = torch.stack([train_ds[key][0] for key in keys])[dctx.rank :: dctx.world].to(device)
    if probe.shape[0] % 2:
        raise ValueError(f"--probe {n} must split into an even number of images per process")
    return probe
