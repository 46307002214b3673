"""`vitplast measure` end to end (tiny digits pretraining, 1-2 batches), the digits cache, and the
matched pairing checked against an independent float64 computation with plain forward hooks."""

from __future__ import annotations

import json

import pytest
import torch
import vitplast.models.digits as digits
from helpers import quiet
from vitplast.cli import main
from vitplast.data.datasets import load_dataset, make_loader
from vitplast.measure import measure

TINY = {"epochs": 1, "depth": 2, "embed_dim": 32, "num_heads": 2, "batch_size": 256, "warmup_epochs": 0}
TINY_JSON = json.dumps(TINY)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One tiny pretraining shared by the tests of this file."""
    d = tmp_path_factory.mktemp("cache")
    digits.digits_checkpoint(d, seed=0, progress=False, config=digits.DigitsConfig(**TINY))
    return d


def test_cli_default_end_to_end(cache, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    argv = ["measure", "--cache-dir", str(cache), "--pretrain-config", TINY_JSON, "--batches", "1",
            "--batch-size", "16", "--out", str(out), "--no-progress"]

    def no_training(*a, **k):
        raise AssertionError("the cached checkpoint must be reused")

    monkeypatch.setattr(digits, "pretrain", no_training)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "ranking:" in text and "digits 0-4" in text and "matched" in text
    for c in ("LN1", "MHA", "LN2", "FC1", "FC2"):
        assert c in text
    res = json.loads((out / "plasticity.json").read_text())
    assert set(res["components"]) == {"LN1", "MHA", "LN2", "FC1", "FC2"}
    assert (out / "plasticity.png").stat().st_size > 1000
    run = json.loads((out / "run.json").read_text())
    assert run["batches"] == 1 and run["pair_data"] == "digits:5-9" and run["batch_size"] == 16
    assert run["seconds"] >= 0 and run["prepare_seconds"] >= 0  # measuring apart from building the model
    files = sorted(p.name for p in cache.iterdir())
    assert len(files) == 1 and files[0].endswith(".safetensors")  # no temporary file left


def _reference_rates(model, batch: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per component, (layers, pairs) float64 rates of halves pairs of ``batch``, by plain hooks."""
    names = {"LN1": "norm1", "MHA": "attn", "LN2": "norm2", "FC1": "mlp.fc1", "FC2": "mlp.fc2"}
    rates = {c: [] for c in names}
    hooks = []
    for blk in model.blocks:
        for c, path in names.items():
            def hook(mod, args, out, c=c):
                a, b = args[0].double().flatten(1), out.double().flatten(1)
                h = a.shape[0] // 2
                rates[c].append((b[:h] - b[h:]).norm(dim=1) / (a[:h] - a[h:]).norm(dim=1))
            hooks.append(blk.get_submodule(path).register_forward_hook(hook))
    with torch.no_grad():
        model(batch)
    for h in hooks:
        h.remove()
    return {c: torch.stack(v) for c, v in rates.items()}


def test_matched_measurement_equals_independent_float64(cache):
    res = measure(cache_dir=str(cache), pretrain_config=TINY, batches=2, batch_size=16, progress=False,
                  reporter=quiet())
    model = digits.pretrained_digits_vit(cache, seed=0, progress=False, config=digits.DigitsConfig(**TINY))
    xs = load_dataset("digits:0-4", "all", img_size=32, seed=0)
    ys = load_dataset("digits:5-9", "all", img_size=32, seed=0)
    per_batch = []
    for (xb, _), (yb, _), _ in zip(make_loader(xs, 8, seed=0, drop_last=True),
                                   make_loader(ys, 8, seed=1, drop_last=True), range(2), strict=False):
        per_batch.append(_reference_rates(model, torch.cat([xb, yb])))
    for c in ("LN1", "MHA", "LN2", "FC1", "FC2"):
        expected = torch.cat([r[c] for r in per_batch], dim=1).mean(dim=1)  # (layers,)
        got = res.mean(c).double()
        assert got.shape == (2,)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=0, msg=c)
        assert int(res.n_pairs(c).sum()) == 2 * 2 * 8  # 2 layers x 2 batches x 8 pairs


def test_all_pairs_within_one_dataset(cache):
    res = measure(cache_dir=str(cache), pretrain_config=TINY, data="digits:0-4", pairs="all", batches=1,
                  batch_size=8, progress=False, reporter=quiet())
    for c in res.components:
        assert res.n_pairs(c).tolist() == [28, 28]  # 8 images: 8 * 7 / 2 distinct pairs, 2 layers
        assert torch.isfinite(res.mean(c)).all()


@pytest.mark.slow
def test_timm_model_on_image_folder_decomposition(tmp_path):
    from PIL import Image

    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(4):
            arr = (torch.rand(20, 20, 3) * 255).to(torch.uint8).numpy()
            Image.fromarray(arr).save(tmp_path / c / f"{i}.png")
    with pytest.warns(UserWarning, match="random init"):
        res = measure(model="vit_tiny_patch16_224", random_init=True, data=str(tmp_path), img_size=32,
                      batches=1, batch_size=8, protocol="decomposition", progress=False, reporter=quiet())
    assert res.components == ("LN1", "MHA", "LN2", "FC1", "FC2")
    for c in res.components:
        m = res.mean(c)
        assert m.shape == (12,) and torch.isfinite(m).all() and (m > 0).all()
        assert int(res.n_pairs(c).sum()) == 12 * 4  # one batch of 8 images: 4 pairs per layer


@pytest.mark.parametrize("extra,needle", [
    (["--pretrain-config", "{bad"], "not valid JSON"),
    (["--pretrain-config", '{"no_such_field": 1}'], "no_such_field"),
    (["--img-size", "64"], "--img-size 64"),
    (["--batch-size", "5000"], "too few images"),
])
def test_cli_errors_exit_2_with_message(cache, capsys, extra, needle):
    argv = ["measure", "--cache-dir", str(cache), "--batches", "1", "--no-progress"]
    if "--pretrain-config" not in extra:
        argv += ["--pretrain-config", TINY_JSON]
    try:
        rc = main(argv + extra)
    except SystemExit as exc:  # rejected by the argument parser
        rc = exc.code
    assert rc == 2
    assert needle in capsys.readouterr().err


def test_digits_cache_key_and_reproducibility():
    cfg = digits.DigitsConfig(**TINY)
    assert cfg.key(0) != cfg.key(1)
    assert cfg.key(0) != digits.DigitsConfig(**{**TINY, "epochs": 2}).key(0)
    tiny = digits.DigitsConfig(**{**TINY, "depth": 1, "embed_dim": 16})
    a, _ = digits.pretrain(tiny, seed=0, progress=False)
    b, _ = digits.pretrain(tiny, seed=0, progress=False)
    c, _ = digits.pretrain(tiny, seed=1, progress=False)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path))
    assert digits.cache_root() == tmp_path
    assert digits.cache_root(tmp_path / "x") == tmp_path / "x"


@pytest.mark.slow
def test_options_object_keywords_and_overrides_measure_alike(cache):
    import dataclasses

    from vitplast.measure import MeasureOptions

    kw = dict(cache_dir=str(cache), pretrain_config=TINY, batches=1, batch_size=8, progress=False)
    opts = MeasureOptions(**kw)  # built without its checks: measure() runs them
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.batches = 2
    a = measure(opts, reporter=quiet())
    b = measure(**kw, reporter=quiet())
    c = measure(opts, seed=1, reporter=quiet())  # keywords replace the object's values
    assert opts.data is None and opts.seed == 0  # the caller's object is left as it was
    for comp in a.components:
        assert torch.equal(a.mean(comp), b.mean(comp))
    assert not all(torch.equal(a.mean(comp), c.mean(comp)) for comp in a.components)
    with pytest.raises(ValueError, match=r"--batch-size 7: must be even"):
        measure(MeasureOptions(**{**kw, "batch_size": 7}), reporter=quiet())
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['bogus'\]"):
        measure(opts, bogus=1, reporter=quiet())


def test_model_arg_reaches_the_model_and_run_json(tmp_path):
    kw = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, data="synthetic", batches=1,
              batch_size=8, progress=False, reporter=quiet())
    with pytest.warns(UserWarning, match="random init"):
        res = measure(**kw, model_kwargs=["patch_size=8", "depth=1", "embed_dim=32", "num_heads=2"],
                      out=str(tmp_path / "o"))
    assert all(res.mean(c).shape == (1,) for c in res.components)  # depth=1: one layer
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["model_kwargs"] == {"patch_size": 8, "depth": 1, "embed_dim": 32, "num_heads": 2}
    assert run["random_init"] and run["provenance"]["weights"] == {"kind": "random", "sha256": None}
    assert run["amp"] == "none" and run["dtype"] == "float32"
    with pytest.raises(ValueError, match="--model-arg does not apply to digits-vit"):
        measure(model_kwargs={"depth": 1}, reporter=quiet())


def test_full_disk_is_exit_1_not_2(cache, tmp_path, capsys, monkeypatch):
    from vitplast_kernels import PlasticityResult

    def disk_full(self, path, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PlasticityResult, "plot", disk_full)
    argv = ["measure", "--cache-dir", str(cache), "--pretrain-config", TINY_JSON, "--batches", "1",
            "--batch-size", "8", "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(argv) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
