"""How images become the model's input: the fixed preparation is the one the datasets always had, the
model's own normalisation reaches image files and the in-memory digits, --mean/--std and
--no-model-transform override it, and train-time augmentation draws from the item's seed alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from vitplast.data.datasets import load_dataset
from vitplast.data.transforms import ImageTransform, fixed_transform, transform_record, with_overrides
from vitplast.options.fields import OptionError, resolve
from vitplast.options.groups import DataOptions

AUGREG = ImageTransform(24, (0.5,) * 3, (0.5,) * 3, "bicubic", 0.9, "center", "test")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    from PIL import Image

    root = tmp_path_factory.mktemp("imgs")
    g = torch.Generator().manual_seed(0)
    for c in ("a", "b"):
        (root / c).mkdir()
        for i in range(5):
            Image.fromarray((torch.rand(30, 41, 3, generator=g) * 255).to(torch.uint8).numpy()).save(
                root / c / f"{i}.png")
    return root


def test_the_fixed_preparation_is_resize_crop_and_imagenet_statistics(folder):
    from PIL import Image
    from torchvision import transforms

    old = transforms.Compose([transforms.Resize(24), transforms.CenterCrop(24), transforms.ToTensor(),
                              transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    image = Image.open(folder / "a" / "0.png").convert("RGB")
    assert torch.equal(fixed_transform(24).image_transform()(image), old(image))
    ds = load_dataset(str(folder), "all", img_size=24)
    assert torch.equal(ds[0][0], old(image))


def test_the_models_transform_reaches_files_and_digits(folder):
    from PIL import Image

    ds = load_dataset(str(folder), "all", img_size=24, transform=AUGREG)
    image = Image.open(folder / "a" / "0.png").convert("RGB")
    assert torch.equal(ds[0][0], AUGREG.image_transform()(image))
    digits_ref = load_dataset("digits:0-1", "val", img_size=16)
    digits = load_dataset("digits:0-1", "val", img_size=16,
                          transform=ImageTransform(16, (0.5,) * 3, (0.5,) * 3))
    assert torch.equal(digits.images, digits_ref.images)  # mean and std 0.5: the digits' own [-1, 1]
    imagenet = load_dataset("digits:0-1", "val", img_size=16, transform=fixed_transform(16))
    x01 = (digits_ref.images + 1) / 2
    expected = (x01 - torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1)) / torch.tensor(
        (0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    torch.testing.assert_close(imagenet.images, expected)


def test_overrides_and_their_checks():
    opts = resolve(DataOptions, {"mean": "0.1", "std": "0.2,0.3,0.4"})
    assert (opts.mean, opts.std) == ((0.1, 0.1, 0.1), (0.2, 0.3, 0.4))
    t = with_overrides(AUGREG, opts.transform_request())
    assert (t.mean, t.std, t.interpolation) == ((0.1,) * 3, (0.2, 0.3, 0.4), "bicubic")
    fixed = resolve(DataOptions, {"model_transform": False}).transform_request()
    assert with_overrides(AUGREG, fixed) is None
    assert transform_record(None, 32)["mean"] == [0.485, 0.456, 0.406]
    bad_values = (({"mean": "0.1,0.2"}, "--mean: expected 1 or 3"),
                  ({"std": "0,1,1"}, "--std: must be a positive number"))
    for bad, match in bad_values:
        with pytest.raises(OptionError, match=match):
            resolve(DataOptions, bad)


def test_augmentation_draws_from_the_item_seed(folder):
    ds = load_dataset(str(folder), "train", img_size=24, transform=AUGREG, augment=True)
    assert ds.augmented
    a, b, c = ds[(0, 11)][0], ds[(0, 11)][0], ds[(0, 12)][0]
    assert torch.equal(a, b) and not torch.equal(a, c)
    state = torch.get_rng_state()
    ds[(1, 5)]
    assert torch.equal(torch.get_rng_state(), state)  # the caller's generator is left as it was
    assert not load_dataset(str(folder), "val", img_size=24, transform=AUGREG).augmented


def test_an_augmented_dataset_addressed_by_index_is_not_augmented(folder):
    """Held-out training images (``--holdout``) are read by plain index from the training set itself:
    there the augmented dataset gives the images the evaluation preparation gives."""
    from vitplast.finetune.data import load_data
    from vitplast.finetune.options import RunSettings

    ds = load_dataset(str(folder), "train", img_size=24, transform=AUGREG, augment=True)
    plain = load_dataset(str(folder), "train", img_size=24, transform=AUGREG)
    assert all(torch.equal(ds[i][0], plain[i][0]) for i in range(len(ds)))
    assert not torch.equal(ds[(0, 11)][0], plain[0][0])
    settings = RunSettings(model="vit_tiny_patch16_224", random_init=True, data=str(folder), holdout=0.25)
    train, _, held = load_data(settings, 0, 24, AUGREG)
    assert train.augmented and len(held) == 2
    for k, position in enumerate(held.positions.tolist()):
        assert torch.equal(held[k][0], plain[position][0])


def test_augmented_training_batches_replay_from_seed_and_iteration(folder):
    from vitplast.finetune.data import StepBatches

    ds = load_dataset(str(folder), "train", img_size=24, transform=AUGREG, augment=True)
    first = StepBatches(ds, 4, seed=3).get(1)[0]
    torch.rand(7)  # the global generators move on: the batch does not
    assert torch.equal(StepBatches(ds, 4, seed=3).get(1)[0], first)
    _, loaded, _ = next(StepBatches(ds, 4, seed=3).iterate(1, 2, workers=1))  # a worker process alike
    assert torch.equal(loaded, first)
    assert not torch.equal(StepBatches(ds, 4, seed=4).get(1)[0], first)
