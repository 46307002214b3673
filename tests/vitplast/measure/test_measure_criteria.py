"""``vitplast measure --criterion``: each unit's exact parameter count (size), several criteria written
beside run.json, and a rerun reusing every score whose model, data and options are the same."""

from __future__ import annotations

import json

import pytest
import timm
import vitplast.models.digits as digits
from vitplast.cli import main
from vitplast.criteria import CRITERIA
from vitplast.measure.options import MeasureOptions

TINY = {"epochs": 1, "depth": 2, "embed_dim": 32, "num_heads": 2, "batch_size": 256, "warmup_epochs": 0}


def test_the_option_lists_every_registered_criterion():
    from vitplast.options.fields import options_for

    for name in CRITERIA:  # the option's choices are the registry's names, listed once
        assert options_for(MeasureOptions, MeasureOptions(criterion=name), {}).criterion == [name]
    with pytest.raises(ValueError, match="nope"):
        options_for(MeasureOptions, MeasureOptions(criterion="nope"), {})


@pytest.mark.slow
def test_size_gives_each_units_exact_parameter_count(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["measure", "--criterion", "size", "--model", "vit_tiny_patch16_224", "--random-init",
                 "--out", str(out), "--no-progress"]) == 0
    res = json.loads((out / "size.json").read_text())
    net = timm.create_model("vit_tiny_patch16_224", pretrained=False)
    paths = {"LN1": "norm1", "MHA": "attn", "LN2": "norm2", "FC1": "mlp.fc1", "FC2": "mlp.fc2"}
    for c, path in paths.items():
        want = [sum(p.numel() for n, p in net.named_parameters() if n.startswith(f"blocks.{l}.{path}."))
                for l in range(12)]
        assert res["components"][c]["per_layer"] == want
        assert res["components"][c]["overall"] == sum(want)
    assert res["components"]["MHA"]["per_layer"][0] == 192 * 576 + 576 + 192 * 192 + 192  # qkv + proj
    run = json.loads((out / "run.json").read_text())
    assert run["criterion"] == ["size"] and "plasticity.json" not in run["files"]
    assert not (out / "plasticity.json").exists()
    for f in ("size.csv", "size.txt", "size.png", "size_heatmap.png"):
        assert (out / f).stat().st_size > 0


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    d = tmp_path_factory.mktemp("cache")
    digits.digits_checkpoint(d, seed=0, progress=False, config=digits.DigitsConfig(**TINY))
    return d


@pytest.mark.slow
def test_several_criteria_then_a_rerun_reuses_them(cache, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["measure", "--cache-dir", str(cache), "--pretrain-config", json.dumps(TINY), "--batches", "1",
            "--batch-size", "8", "--criterion", "plasticity,rgn,cka,spectral", "--criterion-batches", "1",
            "--criterion-seeds", "0,1", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    first = {n: (out / f"{n}.json").read_text() for n in ("plasticity", "rgn", "cka", "spectral")}
    rgn = json.loads(first["rgn"])
    assert set(rgn["components"]["MHA"]["per_seed"]) == {"0", "1"}
    assert rgn["cost"]["backwards"] == 2 and rgn["meta"]["cache_key"]
    assert json.loads(first["spectral"])["components"]["LN1"]["per_layer"] == [None, None]
    capsys.readouterr()
    assert main(argv) == 0
    text = capsys.readouterr().out
    for n in ("plasticity", "rgn", "cka", "spectral"):
        assert f"{n}: reused" in text
        assert (out / f"{n}.json").read_text() == first[n]
    assert main([*argv[:-3], "--criterion-seeds", "0", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "rgn: reused" not in text and "cka: reused" in text  # the seeds change rgn, not cka


def test_an_unknown_criterion_is_refused_with_its_name(capsys, tmp_path):
    assert main(["measure", "--criterion", "size,nope", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--criterion" in err and "'nope'" in err and "spectral" in err
    assert not (tmp_path / "o").exists()
