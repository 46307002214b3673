"""Hostile models, weights and files, tried as a new user (or an attacker) would: every case ends in a
clear refusal (exit status 2, one line naming the file or option and what is wrong; a ``ValueError`` for
Python callers) and, for model folders that ship Python code, nothing of that code runs unless
``--trust-remote-code`` is passed, whatever standard input answers."""

from __future__ import annotations

import io
import json
import sys
import warnings
from pathlib import Path

import pytest
from offline_hub import add_snapshot, offline_cache
from vitplast.cli import main

pytest.importorskip("transformers")


def _cli(argv, capsys, stdin: str | None = None, monkeypatch=None) -> tuple[int, str]:
    """``vitplast ARGV`` in this process: its exit status and its stderr (standard input answering
    ``stdin``, as a user typing it would)."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
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
