"""Hostile models, weights and files, tried as a new user (or an attacker) would: every case ends in a
clear refusal (exit status 2, one line naming the file or option and what is wrong; a ``ValueError`` for
Python callers) and, for model folders that ship Python code, nothing of that code runs unless
``--trust-remote-code`` is passed, whatever standard input answers."""

from __future__ import annotations

import io
import json
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch
from offline_hub import add_snapshot, offline_cache
from vitplast.cli import main

pytest.importorskip("transformers")


def _cli(argv, capsys, stdin: str | None = None, monkeypatch=None) -> tuple[int, str]:
    """``vitplast ARGV`` in this process: its exit status and its stderr (standard input answering
    ``stdin``, as a user typing it would)."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # the command prints each warning on stderr
        rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def _malicious_folder(folder: Path, marker: Path) -> Path:
    """A transformers model folder whose config.json maps its custom model type to a module of the folder
    (``auto_map``) that writes ``marker`` when it is imported."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "evil-vit", "architectures": ["EvilModel"],
        "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModelForImageClassification": "evil.EvilModel",
                     "AutoImageProcessor": "evil.EvilProcessor"}}))
    (folder / "evil.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('the folder code ran')\n"
        "from transformers import PretrainedConfig\n\n\n"
        "class EvilConfig(PretrainedConfig):\n"
        "    model_type = 'evil-vit'\n")
    return folder


@pytest.fixture
def modules_cache(tmp_path, monkeypatch):
    """transformers' copy of a folder's modules kept under the test's tmp dir (were any code imported)."""
    import transformers.dynamic_module_utils as dmu

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "modules"))


def _measure(model: str, out: Path, *extra) -> list:
    return ["measure", "--model", model, "--batches", "1", "--batch-size", "4", "--no-progress", "--out", out,
            *extra]


# ---- 1. no code from a model folder --------------------------------------------------------------------


def test_a_folder_with_custom_code_is_refused_with_stdin_answering_yes(tmp_path, capsys, monkeypatch,
                                                                        modules_cache):
    marker = tmp_path / "PWNED"
    folder = _malicious_folder(tmp_path / "evil", marker)
    rc, err = _cli(_measure(f"hf:{folder}", tmp_path / "out"), capsys, "y\ny\ny\n", monkeypatch)
    assert not marker.exists(), "the model folder's code ran"
    assert rc == 2 and "--trust-remote-code" in err and str(folder) in err and len(err.splitlines()) == 1


def test_a_hub_cache_entry_with_custom_code_is_refused(tmp_path, capsys, monkeypatch, modules_cache):
    marker = tmp_path / "PWNED"
    source = _malicious_folder(tmp_path / "evil", marker)
    cache = offline_cache(tmp_path / "hf", monkeypatch)
    add_snapshot(cache, "org/evil", {f.name: f.read_bytes() for f in source.iterdir()})
    rc, err = _cli(_measure("hf:org/evil", tmp_path / "out"), capsys, "y\ny\ny\n", monkeypatch)
    assert not marker.exists(), "the hub repository's code ran"
    assert rc == 2 and "--trust-remote-code" in err and "org/evil" in err


def test_model_arg_trust_remote_code_is_refused_pointing_at_the_flag(tmp_path, capsys, monkeypatch,
                                                                     modules_cache):
    marker = tmp_path / "PWNED"
    folder = _malicious_folder(tmp_path / "evil", marker)
    rc, err = _cli(_measure(f"hf:{folder}", tmp_path / "out", "--model-arg", "trust_remote_code=true"),
                   capsys, "y\n", monkeypatch)
    assert not marker.exists(), "the model folder's code ran"
    assert rc == 2 and "--model-arg trust_remote_code" in err and "pass --trust-remote-code" in err


def test_python_callers_get_the_refusal_as_a_value_error(tmp_path, monkeypatch, modules_cache):
    from vitplast.models.builder import build_model
    from vitplast.options.groups import ModelOptions

    marker = tmp_path / "PWNED"
    folder = _malicious_folder(tmp_path / "evil", marker)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    with pytest.raises(ValueError, match="--trust-remote-code"):
        build_model(ModelOptions(model=f"hf:{folder}"), 3)
    assert not marker.exists()


def test_trust_remote_code_is_a_recorded_option(tmp_path, capsys):
    from transformers import ViTConfig, ViTForImageClassification

    folder = tmp_path / "vit"
    config = ViTConfig(image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, num_labels=3)
    ViTForImageClassification(config).save_pretrained(folder)
    out = tmp_path / "out"
    rc, err = _cli(_measure(f"hf:{folder}", out, "--data", "synthetic", "--trust-remote-code"), capsys)
    assert rc == 0, err
    assert json.loads((out / "run.json").read_text())["provenance"]["trust_remote_code"] is True


# ---- 2. files a --model-arg names are checked as --weights is ----------------------------------------


def test_a_timm_overlay_file_gets_the_checks_of_weights(tmp_path, capsys):
    overlay = json.dumps({"file": "/etc/passwd"})
    rc, err = _cli(_measure("vit_tiny_patch16_224", tmp_path / "out", "--pretrained", "--model-arg",
                            f"pretrained_cfg_overlay={overlay}"), capsys)
    assert rc == 2 and "pretrained_cfg_overlay file" in err and "/etc/passwd" in err, err
    assert "IndexError" not in err


def test_a_timm_overlay_file_that_is_text_is_named(tmp_path, capsys):
    text = tmp_path / "w.pth"
    text.write_text("hello\n")
    overlay = json.dumps({"file": str(text)})
    rc, err = _cli(_measure("vit_tiny_patch16_224", tmp_path / "out", "--pretrained", "--model-arg",
                            f"pretrained_cfg_overlay={overlay}"), capsys)
    assert rc == 2 and str(text) in err and "holds text" in err, err


# ---- 9. files named in every failure -----------------------------------------------------------------


def _tiny_hf_vit(folder: Path) -> Path:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, num_labels=3)
    ViTForImageClassification(config).save_pretrained(folder)
    return folder


def test_a_corrupt_safetensors_file_in_a_model_folder_is_named(tmp_path, capsys):
    folder = _tiny_hf_vit(tmp_path / "vit")
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    rc, err = _cli(_measure(f"hf:{folder}", tmp_path / "out", "--data", "synthetic"), capsys)
    assert rc == 2 and str(folder / "model.safetensors") in err and "corrupt" in err, err


def test_a_corrupt_config_json_is_named(tmp_path, capsys):
    folder = _tiny_hf_vit(tmp_path / "vit")
    (folder / "config.json").write_text('{"model_type": "vit", "hidden')
    rc, err = _cli(_measure(str(folder), tmp_path / "out", "--data", "synthetic"), capsys)
    assert rc == 2 and str(folder / "config.json") in err and "not valid JSON" in err, err


def test_weights_of_the_wrong_shape_say_expected_and_found(tmp_path, capsys):
    from safetensors.torch import load_file, save_file
    from vitplast.models.digits import SHIPPED_DIR

    state = load_file(str(next(SHIPPED_DIR.glob("*.safetensors"))))
    state["blocks.0.mlp.fc1.weight"] = torch.zeros(257, 64)
    path = tmp_path / "wrong.safetensors"
    save_file(state, str(path))
    rc, err = _cli(_measure("digits-vit", tmp_path / "out", "--weights", path), capsys)
    assert rc == 2 and str(path) in err
    assert "blocks.0.mlp.fc1.weight: expected shape (256, 64), found (257, 64)" in err, err


def test_a_model_of_100000_layers_is_refused_by_its_option_before_it_is_built():
    from vitplast.options.groups import ModelOptions

    with pytest.raises(ValueError, match="--model-arg depth=100000: at most"):
        ModelOptions(model="vit_tiny_patch16_224", random_init=True, model_kwargs={"depth": 100000})


def test_a_digits_config_of_100000_layers_is_refused():
    from vitplast.models.builder import digits_config

    with pytest.raises(ValueError, match="pretrain_config: DigitsConfig depth=100000: at most"):
        digits_config({"depth": 100000})


def test_a_huge_img_size_is_refused_by_the_option(tmp_path, capsys):
    rc, err = _cli(_measure("vit_tiny_patch16_224", tmp_path / "out", "--random-init", "--img-size",
                            "100000"), capsys)
    assert rc == 2 and err.count("\n") == 1 and "--img-size" in err and "4096" in err, err


def test_weights_pointing_at_a_text_file_are_named(tmp_path, capsys):
    path = tmp_path / "w.pth"
    path.write_text("these are not weights\n")
    rc, err = _cli(_measure("digits-vit", tmp_path / "out", "--weights", path), capsys)
    assert rc == 2 and str(path) in err and "holds text" in err, err


def test_weights_holding_a_dict_with_integer_keys_are_named(tmp_path, capsys):
    path = tmp_path / "ints.pth"
    torch.save({"blocks.0.norm1.weight": torch.zeros(64), 7: torch.zeros(2)}, path)
    rc, err = _cli(_measure("digits-vit", tmp_path / "out", "--weights", path), capsys)
    assert rc == 2 and str(path) in err and "int keys" in err, err


def test_weights_pointing_at_dev_zero_are_not_a_missing_file(tmp_path, capsys):
    rc, err = _cli(_measure("digits-vit", tmp_path / "out", "--weights", "/dev/zero"), capsys)
    assert rc == 2 and "/dev/zero" in err and "not a regular file" in err and "no such file" not in err, err


def test_a_corrupt_line_in_the_middle_of_metrics_jsonl_is_named(tmp_path):
    from vitplast.runs.rundir import read_jsonl

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "train", "step": 0}\n{"kind": "tr\n{"kind": "train", "step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2 of 3 is not valid JSON"):
        read_jsonl(path)


# ---- 14. numbers that cannot be trusted say so -------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_weights_are_named_and_left_out_of_the_ranking(value, tmp_path, capsys):
    from safetensors.torch import load_file, save_file
    from vitplast.models.digits import SHIPPED_DIR

    state = load_file(str(next(SHIPPED_DIR.glob("*.safetensors"))))
    state["blocks.2.mlp.fc1.weight"][0, 0] = value
    path = tmp_path / "bad.safetensors"
    save_file(state, str(path))
    out = tmp_path / "out"
    rc, err = _cli(_measure("digits-vit", out, "--weights", path), capsys)
    assert rc == 0, err
    assert "blocks.2.mlp.fc1.weight" in err and "NaN or inf" in err
    assert "non-finite rates" in err and "FC1 (layers 2, 3" in err and "left out of the ranking" in err
    saved = json.loads((out / "plasticity.json").read_text())
    assert "FC1" in saved["unranked"] and all(c not in saved["unranked"] for c, _ in saved["ranking"])
    assert "left out" in capsys.readouterr().out or "left out" in err


def _saved_result(folder: Path, *, model: str = "vit_tiny_patch16_224", components=("LN1", "MHA"),
                  scale: float = 1.0) -> Path:
    """A plasticity.json of two layers: every component's rates ``scale`` * (1, 2) over 4 pairs."""
    import vitplast_kernels as vk

    rates = torch.tensor([1.0, 2.0, 1.0, 2.0], dtype=torch.float64) * scale
    row = [4.0, float(rates.sum()), float((rates ** 2).sum()), 0.0, 0.0]
    stats = torch.tensor([[row, row] for _ in components], dtype=torch.float64)
    result = vk.PlasticityResult(stats, list(components), ["0", "1"], meta={"model": model})
    folder.mkdir(parents=True, exist_ok=True)
    result.to_json(folder / "plasticity.json")
    return folder


def test_compare_refuses_an_unknown_format_version(tmp_path, capsys):
    a, b = _saved_result(tmp_path / "a"), _saved_result(tmp_path / "b")
    saved = json.loads((b / "plasticity.json").read_text())
    saved["format"] = "vitplast-plasticity/99"
    (b / "plasticity.json").write_text(json.dumps(saved))
    rc, err = _cli(["compare", a, b], capsys)
    assert rc == 2 and str(b / "plasticity.json") in err and "vitplast-plasticity/99" in err, err


def test_compare_refuses_impossible_sums(tmp_path, capsys):
    a, b = _saved_result(tmp_path / "a"), _saved_result(tmp_path / "b")
    saved = json.loads((b / "plasticity.json").read_text())
    saved["components"]["MHA"]["sums"][1] = [4.0, 6.0, 1.0, 0.0, 0.0]  # sum of squares below sum**2 / n
    (b / "plasticity.json").write_text(json.dumps(saved))
    rc, err = _cli(["compare", a, b], capsys)
    assert rc == 2 and str(b / "plasticity.json") in err and "MHA layer 1" in err, err


def test_compare_warns_when_the_models_differ(tmp_path, capsys):
    a = _saved_result(tmp_path / "a", model="vit_tiny_patch16_224")
    b = _saved_result(tmp_path / "b", model="resnet50")
    rc, err = _cli(["compare", a, b], capsys)
    assert rc == 0 and "different models" in err and "resnet50" in err, err


def test_compare_aligns_columns_of_any_width(tmp_path, capsys):
    wide = "C" * 100
    a = _saved_result(tmp_path / "a", components=(wide, "MHA"), scale=1e60)
    b = _saved_result(tmp_path / "b", components=(wide, "MHA"), scale=3e60)
    assert main(["compare", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[1:lines.index("")]  # header, rule, one row per component
    assert len(table[2]) > 100 + 2 * 100
    # cells are separated by two spaces or more; each value column ends where its header does
    ends = [[m.end() for m in re.finditer(r"\S+(?: \S+)*", line)] for line in (table[0], table[2], table[3])]
    assert len(ends[0]) == 4 and ends[1][1:] == ends[0][1:] and ends[2][1:] == ends[0][1:], table


def test_a_second_claim_on_the_same_out_is_refused_naming_the_others_lock(tmp_path, capsys):
    from vitplast.runs.lock import RunLock

    out = tmp_path / "claim"
    out.mkdir()
    other = RunLock(out).acquire()  # a claim writing --out right now
    try:
        rc, err = _cli(["claim", "--out", out, "--random-init", "--components", "MHA,FC1,LN1", "--lr", "3e-3",
                        "--seed", "0", "--steps", "1", "--batch-size", "8", "--eval-limit", "16", "--pairs",
                        "8", "--pair-batch", "8", "--threads", "1", "--jobs", "1", "--no-progress"], capsys)
    finally:
        other.release()
    assert rc == 2 and str(out / ".lock") in err and "in use by" in err, err
    assert sorted(p.name for p in out.iterdir()) == [], "the refused claim wrote into --out"
