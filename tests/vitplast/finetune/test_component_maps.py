"""`vitplast finetune --component LABEL=GLOB`: the same component map as `vitplast measure`, so
`--train` names its labels (with layers), the monitor measures them, and bad maps fail before any
file is written."""

from __future__ import annotations

import json
import re

import pytest
import torch
from helpers import quiet
from vitplast.finetune import finetune
from vitplast.finetune import finetune_options as resolve_options

TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            data="synthetic", model_kwargs=dict(patch_size=8, depth=3, embed_dim=32, num_heads=2))
QUIET = dict(reporter=quiet())
MAP = {"ATTN": "blocks.*.attn", "MLP": ("blocks.*.mlp.fc1", "blocks.*.mlp.fc2")}


def test_options_take_the_flag_form_and_the_mapping_form():
    flag = resolve_options(**{"out": "x", "components": ["ATTN=blocks.*.attn", "MLP=blocks.*.mlp.fc1",
                                                        "MLP=blocks.*.mlp.fc2"], "train": "attn@1,MLP"})
    mapping = resolve_options(**{"out": "x", "components": MAP, "train": "ATTN@1,MLP"})
    assert flag.components == mapping.components == MAP


@pytest.mark.parametrize("options, match", [
    ({"components": MAP, "train": "MHA"}, r"--train: unknown choice 'MHA'; expected one of ATTN, MLP"),
    ({"components": ["ATTN"]}, r"--component: expected LABEL=GLOB"),
    ({"components": ["ATTN=blocks..attn"]}, r"--component"),
    ({"components": {"ATTN": ""}}, r"--component"),
])
def test_bad_maps_and_labels_name_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        resolve_options(**{"out": "x", **options})


@pytest.mark.parametrize("components, train, match", [
    ({"ATTN": "blocks.*.nothing"}, "ATTN", r"blocks\.\*\.nothing"),
    (MAP, "ATTN@7", r"layer"),
    ({"MLP": "blocks.*.mlp.fc1"}, "lora", r"MHA"),
])
def test_a_map_the_model_lacks_fails_before_any_file(tmp_path, components, train, match):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=match):
        finetune(**TINY, components=components, train=train, steps=1, batch_size=8, out=str(out), **QUIET)
    assert not out.exists()


def _changed(before: dict, after: dict) -> set[str]:
    assert before.keys() == after.keys()
    return {n for n in before if not torch.equal(before[n], after[n])}


@pytest.mark.slow
def test_custom_labels_train_and_monitor_exactly_their_modules(tmp_path):
    import timm
    from safetensors.torch import load_file, save_file

    net = timm.create_model(TINY["model"], pretrained=False, num_classes=4, img_size=16,
                            **TINY["model_kwargs"])
    start = {n: p.detach().clone() for n, p in net.state_dict().items()}
    save_file(start, tmp_path / "start.safetensors")
    run = tmp_path / "run"
    res = finetune(**TINY, weights=str(tmp_path / "start.safetensors"), components=MAP, train="mlp@-1",
                   lr="1e-2", steps=3, batch_size=16, monitor_every=1, export=True, out=str(run), **QUIET)
    end = load_file(run / "model.safetensors")
    expected = {n for n in start if re.match(r"blocks\.2\.mlp\.fc[12]\.|head\.", n)}
    assert _changed(start, end) == expected
    assert res.runs[0].trainable_params == sum(start[n].numel() for n in expected)
    monitors = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    monitors = [r for r in monitors if r["kind"] == "monitor"]
    assert len(monitors) == 3
    for rec in monitors:
        assert set(rec["plasticity"]) == {"ATTN", "MLP"} and len(rec["plasticity"]["MLP"]) == 3
        assert all(torch.isfinite(torch.tensor(rec["plasticity"]["ATTN"])))
        assert set(rec["grad_norm"]) >= {"MLP", "head"} and "MHA" not in rec["grad_norm"]
    # the map is part of the run's options: --resume with another map is refused, with the same one loads
    with pytest.raises(ValueError, match="components"):
        finetune(**TINY, components={**MAP, "MLP": "blocks.*.mlp.fc2"}, train="mlp@-1", lr="1e-2", steps=3,
                 batch_size=16, monitor_every=1, out=str(run), resume=True, **QUIET)
    again = finetune(**TINY, weights=str(tmp_path / "start.safetensors"), components=MAP, train="mlp@-1",
                     lr="1e-2", steps=3, batch_size=16, monitor_every=1, export=True, out=str(run),
                     resume=True, **QUIET)
    assert again.runs[0].final_acc == res.runs[0].final_acc


@pytest.mark.parametrize("argv, match", [
    (["--component", "ATTN"], "vitplast finetune: error: --component: expected LABEL=GLOB"),
    (["--component", "ATTN=blocks.*.attn", "--train", "MHA@1"],
     "vitplast finetune: error: --train: unknown choice 'MHA'; expected one of ATTN"),
    (["--component", "ATTN=blocks.*.attn", "--train", "ATTN@99", "--model", TINY["model"], "--random-init",
      "--img-size", "16", "--data", "synthetic", "--steps", "1"], "vitplast finetune: error: "),
])
def test_cli_one_line_and_nothing_written(tmp_path, capsys, argv, match):
    from vitplast.cli import main

    out = tmp_path / "run"
    try:
        rc = main(["finetune", *argv, "--out", str(out), "--no-progress"])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith(match), err
    assert not out.exists()


@pytest.mark.parametrize("options, match", [
    ({"train": "FC1", "lora_targets": "MHA@1"}, r"--lora-targets only applies to --train lora"),
    ({"train": "lora", "lora_targets": "MHA@"}, r"--lora-targets: layers ''"),
    ({"train": "lora", "lora_targets": "MLP"}, r"--lora-targets: unknown choice 'MLP'"),
    ({"train": "lora", "lora_targets": "head"}, r"--lora-targets head: components only"),
    ({"train": "lora", "lora_targets": "auto@layer"}, r"--lora-targets auto@layer: components only"),
    ({"train": "lora", "components": MAP, "lora_targets": "MHA"}, r"--lora-targets: unknown choice 'MHA'"),
])
def test_lora_targets_are_checked_with_the_options(options, match):
    pytest.importorskip("peft")
    with pytest.raises(ValueError, match=match):
        resolve_options(**{"out": "x", **options})


@pytest.mark.slow
def test_lora_targets_restrict_the_adapters_to_their_layers(tmp_path):
    pytest.importorskip("peft")
    import warnings

    from vitplast.finetune.model import fresh_model, make_trainable
    from vitplast.finetune.options import RunSettings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = fresh_model(RunSettings(**TINY), 4)
        _, names = make_trainable(net, ("lora",), 4, lora_targets="MHA@1+FC1@-1")
    adapted = {re.sub(r"\.lora_[AB].*", "", n.removeprefix("base_model.model."))
               for n in names if "lora_" in n}
    assert adapted == {"blocks.1.attn.qkv", "blocks.1.attn.proj", "blocks.2.mlp.fc1"}
    assert all("lora_" in n or ".head." in n for n in names)
    # the same through finetune (preflight and run), and a layer the model lacks fails before any file
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="layer"):
        finetune(**TINY, train="lora", lora_targets="MHA@7", steps=1, batch_size=8, out=str(out), **QUIET)
    assert not out.exists()
    res = finetune(**TINY, train="lora", lora_targets="MHA@1", steps=2, batch_size=8, out=str(out), **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one, names = make_trainable(fresh_model(RunSettings(**TINY), 4), ("lora",), 8, lora_targets="MHA@1")
    params = dict(one.named_parameters())
    assert res.runs[0].trainable_params == sum(params[n].numel() for n in names)
    assert json.loads((out / "config.json").read_text())["lora_targets"] == "MHA@1"
