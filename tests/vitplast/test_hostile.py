"""Hostile inputs and situations, tried as a new user (or an attacker) would (issue "Trust III"): one test
per case. First the models, weights and files (remote code, file checks, sizes, untrustworthy numbers),
then the data, outputs, environment and stops (special files, links, image modes, validation before
writing, environment variables, worker bounds, signals, output encodings)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import default_stops
from offline_hub import add_snapshot, offline_cache
from vitplast.cli import main
from vitplast.data.datasets import BadImageError, load_dataset

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
        build_model(ModelOptions(model=f"hf:{folder}").model_request(), 3)
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
    from vitplast.models.digits import digits_config

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
    assert rc == 2 and str(b / "plasticity.json") in err, err
    assert "components.MHA.sums[1]: sums impossible" in err, err


def test_compare_names_the_field_when_layers_disagree_with_the_sums(tmp_path, capsys):
    """A third layer name with two rows of sums: one line naming the file and the field, the same
    reader as the scoring service's (before: a RuntimeError about a tensor shape)."""
    a, b = _saved_result(tmp_path / "a"), _saved_result(tmp_path / "b")
    saved = json.loads((b / "plasticity.json").read_text())
    saved["layers"].append("2")
    (b / "plasticity.json").write_text(json.dumps(saved))
    rc, err = _cli(["compare", a, b], capsys)
    assert rc == 2 and err.count("\n") == 1 and str(b / "plasticity.json") in err, err
    assert ".sums: is not 3 rows (one per layer of 'layers')" in err, err


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
        rc, err = _cli(["claim", "--out", out, "--random-init", "--components", "MHA,FC1,LN1",
                       "--optimizer", "sgd", "--lr", "3e-3",
                        "--seed", "0", "--steps", "1", "--batch-size", "8", "--eval-limit", "16", "--pairs",
                        "8", "--pair-batch", "8", "--threads", "1", "--jobs", "1", "--no-progress"], capsys)
    finally:
        other.release()
    assert rc == 2 and str(out / ".lock") in err and "in use by" in err, err
    assert sorted(p.name for p in out.iterdir()) == [], "the refused claim wrote into --out"


# ====================================================================================================
# data, outputs, environment and stops

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def _images(root: Path, classes=("a", "b"), per_class: int = 4, size: int = 10) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(root / c / f"{i}.png")


def _load(root: Path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = load_dataset(str(root), "all", img_size=8, **kw)
    return ds, [str(w.message) for w in caught]


def _run_cli(argv, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    cap = capsys.readouterr()
    return rc, cap.out, [ln for ln in cap.err.splitlines() if ln.strip()]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VITPLAST_", "SLURM_"))
           and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "python"), **extra)
    return env


# -- item 3: special files are never opened ------------------------------------------------------------


@pytest.mark.parametrize("skip_bad", [False, True], ids=["plain", "skip-bad-images"])
def test_fifo_in_image_folder_is_skipped_never_opened(tmp_path, skip_bad):
    _images(tmp_path)
    os.mkfifo(tmp_path / "a" / "blocks.png")
    os.mkfifo(tmp_path / "b" / "also.jpg")
    ds, said = _load(tmp_path, skip_bad_images=skip_bad)
    assert len(ds) == 8  # the FIFOs are not items: nothing will open them
    line = next(s for s in said if "not regular files" in s)
    assert "skipped 2 file(s)" in line and "blocks.png" in line and "FIFO" in line
    assert all(ds[i] is not None for i in range(len(ds)))


def _unblock(fifo: Path, seconds: float = 1.0) -> None:
    """A thread that, should a reader open ``fifo`` within ``seconds``, connects and closes it (the
    reader sees an empty file) instead of leaving it blocked forever."""
    import threading

    def connect() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:  # no reader yet
                time.sleep(0.01)

    threading.Thread(target=connect, daemon=True).start()


def test_fifo_given_to_open_image_is_refused_unopened(tmp_path):
    from vitplast.data.datasets import open_image

    os.mkfifo(tmp_path / "x.png")  # opening it for reading would block until a writer comes
    _unblock(tmp_path / "x.png")
    with pytest.raises(BadImageError, match="FIFO, not a regular file"):
        open_image(str(tmp_path / "x.png"))


# -- item 4: links are followed once, loops never ------------------------------------------------------


def test_symlink_loop_in_data_folder_is_not_entered(tmp_path):
    _images(tmp_path)
    os.symlink("..", tmp_path / "a" / "up")
    ds, said = _load(tmp_path)
    assert len(ds) == 8 and ds.classes == ["a", "b"]
    assert any("did not follow 1 link(s)" in s and str(tmp_path / "a" / "up") in s for s in said), said


def test_file_reached_twice_through_a_link_is_read_once(tmp_path):
    _images(tmp_path)
    os.symlink(tmp_path / "b" / "0.png", tmp_path / "a" / "zz.png")  # b's image, linked into a
    os.symlink(tmp_path / "b", tmp_path / "bee")  # a class folder that is a link to another
    ds, said = _load(tmp_path)
    assert len(ds) == 8 and ds.classes == ["a", "b"]
    labels = sorted(int(ds[i][1]) for i in range(len(ds)))
    assert labels == [0] * 4 + [1] * 4  # the linked image keeps its own class
    assert any("zz.png" in s for s in said) and any("bee" in s for s in said), said


# -- item 5: 16-bit and float images -------------------------------------------------------------------


def test_sixteen_bit_png_measures_like_the_eight_bit_picture(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(1)
    for kind in ("eight", "sixteen"):
        for c in ("a", "b"):
            (tmp_path / kind / c).mkdir(parents=True)
    for c in ("a", "b"):
        for i in range(3):
            grey = rng.integers(0, 256, (12, 12), dtype=np.uint8)
            Image.fromarray(grey, mode="L").save(tmp_path / "eight" / c / f"{i}.png")
            Image.fromarray(grey.astype(np.uint16) * 257).save(tmp_path / "sixteen" / c / f"{i}.png")
    eight, _ = _load(tmp_path / "eight")
    sixteen, _ = _load(tmp_path / "sixteen")
    x8 = torch.stack([eight[i][0] for i in range(len(eight))])
    x16 = torch.stack([sixteen[i][0] for i in range(len(sixteen))])
    assert float(x16.std()) > 0.1  # not a solid image
    torch.testing.assert_close(x16, x8, rtol=1e-3, atol=1e-3)


def test_float_tiff_is_refused_by_mode(tmp_path):
    from PIL import Image

    _images(tmp_path)
    Image.fromarray(np.random.default_rng(2).random((10, 10), dtype=np.float32), mode="F").save(
        tmp_path / "a" / "float.tif")
    ds, _ = _load(tmp_path)
    samples = ds.inner.dataset.samples
    idx = next(i for i in range(len(ds)) if samples[ds.inner.indices[i]][0].endswith("float.tif"))
    with pytest.raises(BadImageError, match="float.tif.*mode F"):
        ds[idx]


def test_mode_i_beyond_sixteen_bits_is_refused(tmp_path):
    from PIL import Image
    from vitplast.data.datasets import open_image

    Image.fromarray(np.full((6, 6), 70000, dtype=np.int32), mode="I").save(tmp_path / "big.tif")
    with pytest.raises(BadImageError, match="beyond 16 bits"):
        open_image(str(tmp_path / "big.tif"))


# -- items 6, 7, 12: validate before writing; runs that never trained; stale temporaries ---------------

TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            data="synthetic", model_kwargs=dict(patch_size=8, depth=2, embed_dim=32, num_heads=2),
            batch_size=16, optimizer="sgd", lr="0.05", steps=6, monitor_every=3, eval_every=3,
            checkpoint_every=4, seed="3")


class _Stop(BaseException):
    """Stops a run as a kill would (nothing more written)."""


def _stop_after(steps: int):
    def after(done: int) -> None:
        if done >= steps:
            raise _Stop

    return after


def _finetune(out: Path, **kw):
    from vitplast.finetune import finetune
    from vitplast.outputs.reporter import Reporter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return finetune(**{**TINY, **kw}, out=str(out), reporter=Reporter(say=lambda text: None))


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_measure_failing_validation_creates_no_out_parents(tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "results"
    rc, _, err = _run_cli(["measure", "--data", str(tmp_path / "no-such-data"), "--out", str(out)], capsys)
    assert rc == 2 and len(err) == 1, err
    assert _tree(tmp_path) == []  # not even the parents of --out


def test_out_near_path_max_is_refused_before_anything_is_created(tmp_path, capsys):
    room = 4096 - len(str(tmp_path)) - 20  # the path fits, what a run writes below it would not
    parts = [("d" * 200)] * (room // 201) + ["e" * (room % 201 or 1)]
    out = tmp_path.joinpath(*parts)
    rc, _, err = _run_cli(["finetune", "--data", "synthetic", "--steps", "1", "--out", str(out)], capsys)
    assert rc == 2 and len(err) == 1 and "--out" in err[0] and "path limit" in err[0], err
    assert _tree(tmp_path) == []


def test_run_that_never_trained_is_replaced_without_resume(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(_Stop):  # fails before its first checkpoint (as a bad image would)
        _finetune(run, train="MHA", after_step=_stop_after(1))
    assert (run / "config.json").exists() and not (run / "checkpoint.pt").exists()
    result = _finetune(run, train="FC1", lr="0.02")  # the corrected command, no --resume
    assert len(result.runs) == 1 and (run / "summary.json").exists()
    saved = __import__("json").loads((run / "config.json").read_text())
    assert saved["train"] == "FC1" and saved["lr"] == 0.02


def test_stale_temporary_checkpoint_is_removed_at_the_next_start(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(_Stop):
        _finetune(run, train="MHA", after_step=_stop_after(5))  # a checkpoint at step 4
    assert (run / "checkpoint.pt").exists()
    (run / ".checkpoint.x1y2z3w4.tmp.pt").write_bytes(b"")  # what kill -9 during a write leaves
    _finetune(run, train="MHA", resume=True)
    assert (run / "summary.json").exists()
    assert not [p.name for p in run.iterdir() if ".tmp" in p.name]



def test_grid_refuses_its_partial_runs_before_training_any(tmp_path):
    from vitplast.finetune.spec import run_name
    from vitplast.runs.rundir import RunDirError

    grid = tmp_path / "grid"
    with pytest.raises(_Stop):  # the second run of the grid, stopped after its first checkpoint
        _finetune(grid / run_name("FC1", 0.05, 3), train="FC1", after_step=_stop_after(5))
    steps = []
    with pytest.raises(RunDirError, match="1 of 2 runs are unfinished .FC1-lr0.05-s3.*--resume"):
        _finetune(grid, train="MHA,FC1", after_step=steps.append)  # no --resume
    assert steps == []  # refused before MHA trained a step
    assert sorted(p.name for p in grid.iterdir()) == [run_name("FC1", 0.05, 3)]

# -- item 8: environment variables named in their errors -----------------------------------------------


@pytest.mark.parametrize("name,value,accepts", [
    ("VITPLAST_COMPILED_REDUCTION", "garbage", "'inductor', 'kernel'"),
    ("WORLD_SIZE", "abc", "an integer >= 1"),
    ("VITPLAST_AUTOTUNE", "maybe", "1, true, yes"),
    ("SLURM_ARRAY_TASK_ID", "x", "an integer"),
])
def test_bad_environment_variable_is_named_rc_2(name, value, accepts, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(name, value)
    rc, _, err = _run_cli(["measure", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and len(err) == 1 and name in err[0] and accepts in err[0], err
    assert _tree(tmp_path) == []


def test_world_size_is_checked_for_python_callers_too(tmp_path, monkeypatch):
    """A Python caller (no CLI start-up check) of finetune's and claim's options, and of the Ray
    executor's checks, gets the error naming WORLD_SIZE, not int()'s bare message."""
    from vitplast.claim import claim_options
    from vitplast.finetune import finetune_options
    from vitplast.runs.executors.ray_tasks import check_options

    monkeypatch.setenv("WORLD_SIZE", "abc")
    calls = [lambda: finetune_options(out=str(tmp_path / "f"), steps=1),
             lambda: claim_options(out=str(tmp_path / "c"), steps=1),
             lambda: check_options(type("Opts", (), {"jobs": None})())]
    for call in calls:
        with pytest.raises(ValueError, match=r"^WORLD_SIZE='abc': must be an integer >= 1"):
            call()
    assert _tree(tmp_path) == []


@pytest.mark.slow
def test_kernel_library_reads_its_variables_at_use_not_import(tmp_path):
    code = ("import vitplast_kernels, vitplast.cli\n"
            "from vitplast_kernels.backends import cuda\n"
            "try:\n    cuda.autotune_enabled()\nexcept ValueError as e:\n    print('use:', e)\n")
    env = _env(VITPLAST_COMPILED_REDUCTION="garbage", VITPLAST_AUTOTUNE="2")
    done = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "use: VITPLAST_AUTOTUNE='2'" in done.stdout


def test_vitplast_traceback_is_on_for_1_true_yes_only(monkeypatch):
    from vitplast.cli.errors import exit_status

    for value, shown in (("0", False), ("false", False), ("no", False), ("", False), ("1", True),
                         ("true", True), ("YES", True)):
        monkeypatch.setenv("VITPLAST_TRACEBACK", value)
        try:
            raise TypeError("a bug")
        except TypeError as exc:
            if shown:
                with pytest.raises(TypeError):
                    exit_status("vitplast measure", "measure", exc)
            else:
                assert exit_status("vitplast measure", "measure", exc) == 1, value


# -- item 10: bounded workers --------------------------------------------------------------------------


def test_workers_beyond_the_usable_cpus_are_refused_before_anything_starts(tmp_path, capsys):
    too_many = len(os.sched_getaffinity(0)) + 1
    rc, _, err = _run_cli(["finetune", "--data", "synthetic", "--steps", "1", "--workers", str(too_many),
                       "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and len(err) == 1 and f"--workers {too_many}" in err[0] and "CPU" in err[0], err
    assert _tree(tmp_path) == []


def test_python_callers_get_the_same_workers_bound(tmp_path):
    from vitplast.finetune import finetune_options
    from vitplast.options.fields import OptionError

    too_many = len(os.sched_getaffinity(0)) + 1
    with pytest.raises(OptionError, match=rf"--workers: {too_many}: .*CPU"):
        finetune_options(data="synthetic", workers=too_many, out=str(tmp_path / "o"))
    assert _tree(tmp_path) == []


# -- items 10, 11: clean stops -------------------------------------------------------------------------

SMALL_MODEL = ["--model", "vit_tiny_patch16_224", "--img-size", "16", "--model-arg", "patch_size=8",
               "--model-arg", "depth=2", "--model-arg", "embed_dim=32", "--model-arg", "num_heads=2",
               "--random-init"]


def _in_group(pgid: int) -> list[int]:
    """Processes of the process group ``pgid`` that still run (zombies aside)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry))
    return alive


def _stop_grid(tmp_path: Path, how: str) -> tuple[int, list[str], list[int]]:
    """A finetune grid of two runs in two worker processes, each loading images in a process of its
    own, stopped (``how``: SIGTERM to the command, or Ctrl-C: SIGINT to its process group) once a run
    has a checkpoint; its exit status, stderr lines, and what of its process group still runs."""
    _images(tmp_path / "data", per_class=24, size=16)
    out = tmp_path / "grid"
    argv = [PY, "-m", "vitplast.cli", "finetune", *SMALL_MODEL, "--data", str(tmp_path / "data"),
            "--train", "MHA,FC1", "--steps", "100000", "--batch-size", "8", "--checkpoint-every", "2",
            "--jobs", "2", "--workers", "1", "--no-progress", "--no-plots", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True, preexec_fn=default_stops)
    try:
        deadline = time.monotonic() + 240
        while not any(out.glob("*/checkpoint.pt")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1]
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 1.0  # a moment for the kernel to reap what was killed
        while _in_group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return proc.returncode, [ln for ln in err.splitlines() if ln.strip()], _in_group(proc.pid)
    finally:
        for pid in _in_group(proc.pid):
            with __import__("contextlib").suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_stops_a_grid_with_its_workers_exit_143(tmp_path):
    rc, err, left = _stop_grid(tmp_path, "SIGTERM")
    assert rc == 143 and len(err) == 1 and "stopped by SIGTERM" in err[0] and "--resume" in err[0], err
    assert left == [], f"processes outlived the command: {left}"


@pytest.mark.slow
def test_ctrl_c_on_jobs_2_leaks_no_semaphore_exit_130(tmp_path):
    rc, err, left = _stop_grid(tmp_path, "SIGINT")
    assert rc == 130 and len(err) == 1 and "interrupted" in err[0], err  # no "leaked semaphore" warning
    assert left == [], f"processes outlived the command: {left}"


# -- item 13: output never costs results ---------------------------------------------------------------


@pytest.mark.slow
def test_ascii_terminal_keeps_the_measurement(tmp_path, monkeypatch):
    import io

    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # PYTHONIOENCODING=ascii, LC_ALL=C
    monkeypatch.setattr(sys, "stdout", stdout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["measure", "--batches", "1", "--no-progress", "--out", str(tmp_path / "res")])
    stdout.flush()
    printed = stdout.buffer.getvalue().decode("ascii")
    assert rc == 0 and (tmp_path / "res" / "plasticity.json").exists()
    assert "+/-" in printed  # the table's mean +/- half-width, in ASCII


def test_closed_pipe_on_stdout_keeps_the_measurement(tmp_path, monkeypatch):
    import io

    class ClosedPipe(io.TextIOBase):  # `vitplast measure | head -1` once head has exited
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["measure", "--batches", "1", "--no-progress", "--out", str(tmp_path / "res")])
    assert rc == 0 and (tmp_path / "res" / "plasticity.json").exists()


# -- issue "Trust IV", item 2: a run summary read back is checked ------------------------------------------
def _summary_file(path: Path, **changes) -> Path:
    """A finished run's summary.json as vitplast writes it, with ``changes`` made and its checksum
    recomputed (an edit that the checksum alone cannot catch)."""
    from vitplast.outputs.result_files import with_checksum
    from vitplast.runs.summary import KIND, VERSION, RunSummary

    summary = RunSummary(train="MHA", lr=0.01, seed=0, final_acc=0.5, initial_acc=0.25, trainable_params=100,
                         best_acc=0.5, run_dir=str(path.parent))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(with_checksum({**summary.to_json(), **changes}, kind=KIND, version=VERSION)))
    return path


@pytest.mark.parametrize("field, value", [("best_acc", 7.5), ("best_acc", -3), ("final_acc", 1.5),
                                          ("initial_acc", None), ("trainable_params", -1),
                                          ("trainable_params", 2.5), ("seconds", -1.0), ("lr", 0),
                                          ("plasticity_start", {"MHA": -0.5})])
def test_impossible_summary_value_is_refused_naming_file_and_field(field, value, tmp_path):
    from vitplast.outputs.result_files import ResultFileError
    from vitplast.runs.rundir import RunDir

    path = _summary_file(tmp_path / "run" / "summary.json", **{field: value})
    with pytest.raises(ResultFileError) as exc:
        RunDir(tmp_path / "run").summary()
    assert exc.value.path == str(path) and exc.value.field.split(".")[0] == field, str(exc.value)


@pytest.mark.parametrize("field, value", [("train", "FC1"), ("lr", 0.1), ("seed", 3)])
def test_a_summary_that_disagrees_with_its_runs_config_is_refused(field, value, tmp_path):
    """summary.json edited (checksum recomputed) to say another train, lr or seed than config.json, which
    the run was trained with: refused naming the field, never read as that other run's result."""
    from vitplast.outputs.result_files import ResultFileError
    from vitplast.runs.rundir import RunDir

    path = _summary_file(tmp_path / "run" / "summary.json", **{field: value})
    (tmp_path / "run" / "config.json").write_text(json.dumps({"train": "MHA", "lr": 0.01, "seed": 0}))
    with pytest.raises(ResultFileError) as exc:
        RunDir(tmp_path / "run").summary()
    assert exc.value.path == str(path) and exc.value.field == field and "config.json" in exc.value.reason
    _summary_file(path)  # as written: believed
    assert RunDir(tmp_path / "run").summary()["train"] == "MHA"


def test_edited_or_old_summary_is_refused_by_checksum_and_version(tmp_path):
    from vitplast.outputs.result_files import ResultFileError
    from vitplast.runs.summary import RunSummary

    path = _summary_file(tmp_path / "a" / "summary.json")
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "final_acc": 0.9}))  # edited, checksum kept
    with pytest.raises(ResultFileError, match="checksum.*edited"):
        RunSummary.read(path)
    old = {k: v for k, v in doc.items() if k not in ("format", "checksum")}  # before the format had a version
    path.write_text(json.dumps(old))
    with pytest.raises(ResultFileError, match=r"summary.json: format: .*vitplast-run-summary/1.*rerun"):
        RunSummary.read(path)


def _claim_args(out: Path) -> list[str]:
    return ["claim", "--out", str(out), *SMALL_MODEL, "--data", "synthetic", "--pretrain-data", "synthetic",
            "--components", "MHA,FC1,LN1", "--optimizer", "sgd", "--lr", "3e-3", "--seed", "0", "--steps",
            "2",
            "--batch-size", "8",
            "--pairs", "8", "--pair-batch", "4", "--bootstrap", "10", "--permutations", "10", "--criteria",
            "plasticity", "--jobs", "1", "--threads", "1", "--no-progress"]


@pytest.mark.slow
@pytest.mark.parametrize("best_acc", [7.5, -3])
def test_claim_analyse_only_refuses_an_impossible_accuracy_rc_2(best_acc, tmp_path, capsys):
    out = tmp_path / "c"
    rc, _ = _cli(_claim_args(out), capsys)
    assert rc == 0
    path = out / "runs" / "FC1-lr0.003-s0" / "summary.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(__import__("vitplast.outputs.result_files", fromlist=["x"]).with_checksum(
        {**doc, "best_acc": best_acc}, kind="vitplast-run-summary", version=1)))
    rc, err = _cli([*_claim_args(out), "--analyse-only"], capsys)
    lines = [line for line in err.splitlines() if line.strip() and "warning" not in line.lower()]
    assert rc == 2 and len(lines) == 1, err
    assert str(path) in lines[0] and "best_acc" in lines[0] and "[0, 1]" in lines[0], lines[0]


# -- issue 46: inputs refused instead of cast or believed, files named ---------------------------------

TINY_TIMM = {"img_size": 16, "patch_size": 8, "depth": 1, "embed_dim": 32, "num_heads": 2}


def _non_floating(state: dict, dtype: torch.dtype) -> dict:
    return {k: (v > 0) if dtype == torch.bool else (v * 100).to(dtype) for k, v in state.items()}


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool], ids=["int64", "bool"])
@pytest.mark.parametrize("route", ["weights", "timm-overlay", "hf-folder"])
def test_integer_or_boolean_weights_are_refused_by_name_on_every_loading_path(route, dtype, tmp_path,
                                                                              capsys):
    from safetensors.torch import load_file, save_file

    out = tmp_path / "out"
    if route == "weights":
        from vitplast.models.digits import SHIPPED_DIR

        file = tmp_path / "w.safetensors"
        save_file(_non_floating(load_file(str(next(SHIPPED_DIR.glob("*.safetensors")))), dtype), str(file))
        argv = _measure("digits-vit", out, "--weights", file)
    elif route == "timm-overlay":
        import timm

        file = tmp_path / "w.pth"
        state = timm.create_model("vit_tiny_patch16_224", **TINY_TIMM).state_dict()
        torch.save(_non_floating(state, dtype), file)
        args = [a for k, v in TINY_TIMM.items() if k != "img_size" for a in ("--model-arg", f"{k}={v}")]
        argv = _measure("vit_tiny_patch16_224", out, "--img-size", "16", *args, "--pretrained", "--model-arg",
                        "pretrained_cfg_overlay=" + json.dumps({"file": str(file)}), "--data", "synthetic")
    else:
        folder = _tiny_hf_vit(tmp_path / "vit")
        file = folder / "model.safetensors"
        save_file(_non_floating(load_file(str(file)), dtype), str(file), metadata={"format": "pt"})
        argv = _measure(f"hf:{folder}", out, "--data", "synthetic")
    capsys.readouterr()  # what making the files printed
    rc, err = _cli(argv, capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and str(file) in err, err
    assert "non-floating tensors" in err and re.search(rf"\.weight \({re.escape(str(dtype))}\)", err), err


def test_meta_tensors_are_refused_at_the_call_naming_the_argument():
    import vitplast_kernels as vk

    real, meta = torch.randn(8, 4), torch.empty(8, 4, device="meta")
    with pytest.raises(ValueError, match=r"^acts\['MHA'\] output is on the meta device"):
        vk.pairwise_plasticity({"MHA": (real, meta)})  # before: accepted, failing later in to_dict()
    with pytest.raises(ValueError, match=r"^b is on the meta device"):
        vk.pair_sq_distances(real, meta)


def test_threads_beyond_the_usable_cpus_are_refused_like_workers(tmp_path):
    # through the options every command validates (the CLI prints the same line, rc 2); before, claim
    # started 100000 threads and died of it
    from vitplast.claim import claim_options
    from vitplast.finetune import finetune_options
    from vitplast.options.fields import OptionError
    from vitplast.profile.run import profile_options

    too_many = 100000
    for make in (lambda: claim_options(threads=too_many, out=str(tmp_path / "c")),
                 lambda: finetune_options(data="synthetic", threads=too_many, out=str(tmp_path / "f")),
                 lambda: profile_options(None, {"threads": too_many, "out": str(tmp_path / "p")})):
        with pytest.raises(OptionError, match=rf"^--threads: {too_many} threads, but this process may use "
                                              rf"{len(os.sched_getaffinity(0))} CPU"):
            make()
    assert _tree(tmp_path) == []


def test_an_empty_class_folder_is_named(tmp_path, capsys):
    _images(tmp_path / "data", classes=("a", "b"))
    (tmp_path / "data" / "c").mkdir()
    rc, _, err = _run_cli(["measure", "--data", str(tmp_path / "data"), "--batches", "1", "--no-progress",
                           "--out", str(tmp_path / "out")], capsys)
    empty = str(tmp_path / "data" / "c")
    assert rc == 2 and len(err) == 1 and f"class folder {empty!r} holds no image" in err[0], err


def test_a_truncated_run_config_json_is_named(tmp_path, capsys):
    from vitplast.runs.rundir import RunDir

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"model": "digits-vit", "tra')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(run / 'config.json'))}: not valid JSON "
                                         r"\(Unterminated string"):
        RunDir(run).saved_config()


def test_a_malformed_timm_overlay_is_refused_with_the_option_name(tmp_path, capsys):
    for overlay, says in [("[1, 2]", "expected a JSON object"), ('{"fil": "x.pth"}', "'fil' is not a field"),
                          ('{"input_size": 5}', "input_size: expected Tuple[int, int, int], got 5")]:
        rc, err = _cli(_measure("vit_tiny_patch16_224", tmp_path / "out", "--pretrained", "--model-arg",
                                f"pretrained_cfg_overlay={overlay}"), capsys)
        assert rc == 2 and len(err.splitlines()) == 1, err
        assert err.split("error: ", 1)[1].startswith("--model-arg pretrained_cfg_overlay: "), err
        assert says in err, err


@pytest.mark.parametrize("kind", ["fifo", "directory", "link-to-device"])
def test_only_a_regular_file_is_read_as_the_shipped_checkpoint(kind, tmp_path, monkeypatch):
    from vitplast.models import digits

    path = tmp_path / f"digits_vit-{digits.SHIPPED['key']}.safetensors"
    if kind == "fifo":
        os.mkfifo(path)
        _unblock(path)  # before, the read waited for a writer
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/null")
    monkeypatch.setattr(digits, "SHIPPED_DIR", tmp_path)
    monkeypatch.setattr(digits, "_SHIPPED_CHECKED", set())
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: the shipped digits ViT is not a regu"):
        digits.shipped_checkpoint()


# -- issue "Trust IV", item 5: a hangup during a claim with worker processes -----------------------------
def _shm_semaphores() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("sem.*")} if Path("/dev/shm").is_dir() else set()


@pytest.mark.slow
def test_hangup_stops_a_claim_with_two_workers_exit_129(tmp_path):
    """A closed terminal (SIGHUP to the process group) while a claim trains in two worker processes:
    the one line and rc 129, no traceback (the resource tracker survives the hangup), nothing of the
    group left running, no semaphore of the command's processes left in /dev/shm."""
    _images(tmp_path / "data", per_class=24, size=16)
    out = tmp_path / "claim"
    argv = [PY, "-m", "vitplast.cli", "claim", *SMALL_MODEL, "--data", str(tmp_path / "data"), "--components",
            "MHA,FC1,LN1", "--optimizer", "sgd", "--lr", "3e-3", "--seed", "0", "--steps", "100000",
            "--batch-size", "8",
            "--checkpoint-every", "2", "--pairs", "8", "--pair-batch", "4", "--jobs", "2", "--threads", "1",
            "--workers", "1", "--no-progress", "--out", str(out)]
    before = _shm_semaphores()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True, preexec_fn=default_stops)
    group: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while (not any(out.glob("runs/*/checkpoint.pt")) and proc.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1]
        group = {proc.pid, *_in_group(proc.pid)}  # the driver, its workers and their loaders, the tracker
        os.killpg(proc.pid, signal.SIGHUP)
        _, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 2.0  # a moment for the kernel to reap what was killed
        while _in_group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _in_group(proc.pid)
    finally:
        for pid in _in_group(proc.pid):
            with __import__("contextlib").suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 129 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("vitplast claim: stopped by SIGHUP: ") and str(out) in lines[0], lines
    assert left == [], f"processes outlived the command: {left}"
    ours = [n for n in _shm_semaphores() - before if any(f"-{pid}-" in n for pid in group)]
    assert ours == [], f"semaphores left in /dev/shm: {ours}"
