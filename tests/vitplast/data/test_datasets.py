"""vitplast.data.datasets: dataset specs, deterministic splits, class subsets, ImageFolder, errors."""

from __future__ import annotations

import pytest
import torch
from vitplast.data.datasets import first_batches, load_dataset, make_loader


def _all(ds):
    xs, ys = zip(*(ds[i] for i in range(len(ds))), strict=True)
    return torch.stack(xs), torch.tensor(ys)


def test_digits_items_shapes_and_range():
    ds = load_dataset("digits", "train", img_size=16, seed=0)
    x, y = ds[0]
    assert x.shape == (3, 16, 16) and x.dtype == torch.float32
    assert isinstance(y, int) and 0 <= y < 10
    assert ds.num_classes == 10 and ds.classes == [str(i) for i in range(10)]
    assert torch.equal(x[0], x[1]) and torch.equal(x[0], x[2])  # grey on 3 channels
    assert -1.0 <= float(ds.images.min()) and float(ds.images.max()) <= 1.0


def test_digits_split_is_deterministic_disjoint_and_complete():
    tr, va, al = (load_dataset("digits", s, img_size=8, seed=3) for s in ("train", "val", "all"))
    assert len(tr) + len(va) == len(al) == 1797
    assert 0.15 < len(va) / len(al) < 0.25
    # every image of 'all' is in exactly one of train / val (as multisets of rows)
    rows = lambda ds: sorted(map(tuple, ds.images[:, 0].flatten(1).tolist()))  # noqa: E731
    assert sorted(rows(tr) + rows(va)) == rows(al)
    again = load_dataset("digits", "val", img_size=8, seed=3)
    assert torch.equal(again.images, va.images)
    other = load_dataset("digits", "val", img_size=8, seed=4)
    assert not torch.equal(other.images, va.images)
    # stratified: every class in val
    assert set(va.labels.tolist()) == set(range(10))


def test_digit_subsets_relabel_and_are_disjoint():
    lo = load_dataset("digits:0-4", "all", img_size=8)
    hi = load_dataset("digits:5-9", "all", img_size=8)
    full = load_dataset("digits", "all", img_size=8)
    assert lo.classes == ["0", "1", "2", "3", "4"] and hi.classes == ["5", "6", "7", "8", "9"]
    assert lo.num_classes == hi.num_classes == 5
    assert set(lo.labels.tolist()) == set(range(5)) == set(hi.labels.tolist())
    assert len(lo) + len(hi) == len(full)
    assert len(lo) == int((full.labels < 5).sum())
    # the hi subset's label 0 is digit 5: same images as full's class 5
    assert torch.equal(hi.images[hi.labels == 0], full.images[full.labels == 5])
    odd = load_dataset("digits:1,3,7", "all", img_size=8)
    assert odd.classes == ["1", "3", "7"]


@pytest.mark.parametrize("spec", ["digits:a-b", "digits:3-12", "nope", "synthetic:5", "cifar10:"])
def test_bad_specs_raise_value_error(spec):
    with pytest.raises(ValueError, match="spec"):
        load_dataset(spec)


def test_bad_split_and_size():
    with pytest.raises(ValueError, match="split"):
        load_dataset("digits", "test")
    with pytest.raises(ValueError, match="img_size"):
        load_dataset("digits", img_size=0)


def test_synthetic_has_learnable_structure():
    tr = load_dataset("synthetic", "train", img_size=16)
    va = load_dataset("synthetic", "val", img_size=16)
    assert tr.num_classes == 4 and len(tr) == 320 and len(va) == 80
    means = torch.stack([tr.images[tr.labels == c].mean(0) for c in range(4)]).flatten(1)
    d = torch.cdist(va.images.flatten(1), means)
    acc = (d.argmin(1) == va.labels).float().mean().item()
    assert acc > 0.9, f"nearest-class-mean accuracy {acc}"


@pytest.mark.parametrize("kind,folder",
                         [("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python")])
def test_cifar_missing_says_where(tmp_path, kind, folder):
    with pytest.raises(FileNotFoundError) as info:
        load_dataset(f"{kind}:{tmp_path}")
    msg = str(info.value)
    assert folder in msg and str(tmp_path) in msg


def _write_images(root, classes, per_class, size=10):
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for c in classes:
        d = root / c
        d.mkdir(parents=True)
        for i in range(per_class):
            arr = (torch.rand(size, size, 3, generator=g) * 255).to(torch.uint8).numpy()
            Image.fromarray(arr).save(d / f"{i}.png")


def test_image_folder_flat_split(tmp_path):
    _write_images(tmp_path, ["cat", "dog"], 5)
    tr = load_dataset(str(tmp_path), "train", img_size=12)
    va = load_dataset(str(tmp_path), "val", img_size=12)
    al = load_dataset(str(tmp_path), "all", img_size=12)
    assert tr.classes == ["cat", "dog"] and tr.num_classes == 2
    assert len(tr) + len(va) == len(al) == 10 and len(va) == 2
    x, y = tr[0]
    assert x.shape == (3, 12, 12) and x.dtype == torch.float32 and y in (0, 1)


def test_image_folder_train_val_dirs(tmp_path):
    _write_images(tmp_path / "train", ["a", "b", "c"], 2)
    _write_images(tmp_path / "val", ["a", "b", "c"], 1)
    assert len(load_dataset(str(tmp_path), "train", img_size=8)) == 6
    assert len(load_dataset(str(tmp_path), "val", img_size=8)) == 3
    al = load_dataset(str(tmp_path), "all", img_size=8)
    assert len(al) == 9 and al.classes == ["a", "b", "c"]
    xs, ys = _all(al)
    assert xs.shape == (9, 3, 8, 8) and sorted(ys.tolist()) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_empty_folder_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="ImageFolder"):
        load_dataset(str(tmp_path))


def test_make_loader_order_depends_only_on_seed():
    ds = load_dataset("synthetic", "val", img_size=8)
    first = [y.tolist() for _, y in make_loader(ds, 16, seed=5)]
    second = [y.tolist() for _, y in make_loader(ds, 16, seed=5)]
    third = [y.tolist() for _, y in make_loader(ds, 16, seed=6)]
    assert first == second and first != third
    xb, yb = next(iter(make_loader(ds, 16, seed=5)))
    assert xb.shape == (16, 3, 8, 8) and yb.dtype == torch.int64
    with pytest.raises(ValueError, match="batch_size"):
        make_loader(ds, 0)


def test_first_batches_are_the_loaders_first_in_its_order():
    ds = load_dataset("synthetic", "val", img_size=8)
    taken = first_batches(ds, 16, 3, seed=5)
    loaded = [y.tolist() for _, y in make_loader(ds, 16, seed=5)]
    assert [y.tolist() for _, y in taken] == loaded[:3]
    assert len(first_batches(ds, 16, 10_000, seed=5)) == len(loaded)  # the loader ends first
