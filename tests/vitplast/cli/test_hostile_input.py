"""Bad input to `vitplast finetune`, `claim`, `measure` and `profile`: each
ends in one line on stderr, no traceback, the conventional exit status (2 bad input, 1 a failure while
working, 130 Ctrl-C), and leaves nothing behind: the corrected command finds --out as it was."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
from vitplast.cli import main

TINY = ["--model", "vit_tiny_patch16_224", "--img-size", "16", "--model-arg", "patch_size=8", "--model-arg",
        "depth=2", "--model-arg", "embed_dim=32", "--model-arg", "num_heads=2", "--data", "synthetic",
        "--random-init"]
FINETUNE = [*TINY, "--steps", "1", "--batch-size", "16", "--train", "MHA", "--no-progress", "--no-plots"]
HUGE_SEED = "99999999999999999999"


def _cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    """Exit status and the non-empty stderr lines of ``vitplast ARGV`` run in this process."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rc = main(argv)
    except SystemExit as exc:  # argparse's own checks
        rc = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return rc, [ln for ln in err.splitlines() if ln.strip()]


def _one_line(lines: list[str], command: str) -> str:
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"vitplast {command}: "), lines[0]
    assert "\x1b" not in lines[0], repr(lines[0])  # no terminal escapes
    return lines[0]


@pytest.fixture
def no_build(monkeypatch):
    """Model building fails the test: errors must come before any work."""
    import vitplast.models.builder as mb
    from vitplast.cli import build_parser

    build_parser()  # every command imported first, then each module that took build_model gets the stand-in

    def build(*a, **k):
        raise AssertionError("the model must not be built: the error is found before any work")

    original = mb.build_model
    for module in [m for m in sys.modules.values() if getattr(m, "build_model", None) is original]:
        monkeypatch.setattr(module, "build_model", build)


# ------------------------------------------------------------------------------------------ finetune
def _corrupt_weights(tmp: Path) -> list[str]:
    (tmp / "w.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":")
    return ["--weights", str(tmp / "w.safetensors")]


def _empty_dir(tmp: Path) -> list[str]:
    (tmp / "empty").mkdir()
    return ["--data", str(tmp / "empty")]


def _junk_folder(tmp: Path) -> list[str]:
    (tmp / "junk" / "a").mkdir(parents=True)
    (tmp / "junk" / "a" / "notes.txt").write_text("no image")
    return ["--data", str(tmp / "junk")]


FINETUNE_CASES = {
    "model": (lambda t: ["--model", "nosuch_model"], "is not a timm model name"),
    "weights": (_corrupt_weights, "is not a readable .safetensors file"),
    "data-empty": (_empty_dir, "no images found"),
    "data-junk-folder": (_junk_folder, "no images found"),
    "data-junk-spec": (lambda t: ["--data", "junk"], "unknown dataset spec 'junk'"),
    "model-arg": (lambda t: ["--model-arg", "bogus_kw=3"], "does not take the argument bogus_kw"),
    "probe": (lambda t: ["--probe", "100000"], "--probe 100000 exceeds the training set"),
    "lora-r": (lambda t: ["--train", "lora", "--lora-r", "0"], "--lora-r: must be a positive integer"),
    "budget": (lambda t: ["--train", "auto", "--budget", "1"], "--budget 1 is smaller than the classifier"),
    "seed-huge": (lambda t: ["--seed", HUGE_SEED], "--seed: must be an integer in 0..4294967295"),
    "seed-negative": (lambda t: ["--seed", "-1"], "--seed: must be an integer in 0..4294967295"),
    "steps-huge": (lambda t: ["--steps", "100000000000000000000"], "--steps: must be an integer in 1.."),
    "steps-float": (lambda t: ["--steps", "1e20"], "--steps: expected an integer, got '1e20'"),
}


@pytest.mark.parametrize("case", sorted(FINETUNE_CASES))
def test_finetune_bad_input_leaves_nothing_behind(case, tmp_path, capsys):
    make, needle = FINETUNE_CASES[case]
    extra = make(tmp_path)
    out = tmp_path / "run"
    rc, lines = _cli(["finetune", *FINETUNE, *extra, "--out", str(out)], capsys)
    line = _one_line(lines, "finetune")
    assert rc == 2 and needle in line, line
    if case == "model-arg":
        assert "img_size" not in line.split("(--model-arg)")[0]  # only the argument given is blamed
    assert not out.exists()  # no config.json, no .lock: the corrected command is not blocked


def test_corrected_finetune_runs_after_a_refused_one(tmp_path, capsys):
    out = tmp_path / "run"
    rc, _ = _cli(["finetune", *FINETUNE, "--probe", "100000", "--out", str(out)], capsys)
    assert rc == 2
    rc, lines = _cli(["finetune", *FINETUNE, "--probe", "8", "--out", str(out)], capsys)
    assert rc == 0, lines
    assert (out / "summary.json").exists()


@pytest.mark.parametrize("command", ["finetune", "claim"])
def test_out_that_is_a_file(command, tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("mine")
    for out, needle in ((afile, "is an existing file, not a directory"), (afile / "sub", "is a file")):
        argv = [command, *(FINETUNE if command == "finetune" else ["--no-progress"]), "--out", str(out)]
        rc, lines = _cli(argv, capsys)
        assert rc == 2 and needle in _one_line(lines, command)
    assert afile.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


# ------------------------------------------------------------------------------------------ claim
@pytest.mark.parametrize("argv,needle", [
    (["--jobs", "1000"], "--jobs 1000: at most one run per core"),
    (["--seed", HUGE_SEED], "--seed: must be an integer in 0..4294967295"),
    (["--seed", "-1"], "--seed: must be an integer in 0..4294967295"),
    (["--measure-seed", "-1"], "--measure-seed: must be an integer in 0.."),
    (["--steps", "100000000000000000000"], "--steps: must be an integer in 1.."),
])
def test_claim_bad_values(argv, needle, tmp_path, capsys):
    rc, lines = _cli(["claim", "--no-progress", "--out", str(tmp_path / "o"), *argv], capsys)
    assert rc == 2 and needle in _one_line(lines, "claim")
    assert not (tmp_path / "o").exists()


def test_claim_refuses_a_foreign_directory(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    rc, lines = _cli(["claim", "--no-progress", "--out", str(other)], capsys)
    assert rc == 2 and "(datasets or optimisers) did not write (notes.txt)" in _one_line(lines, "claim")
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_a_claim_of_one_arm_under_the_two_arm_default_says_which_option(tmp_path, capsys):
    """A claim made when the default was one optimiser (its files in OUT itself), run again with
    today's default (two arms): refused naming the option that makes it one arm again."""
    old = tmp_path / "old"
    (old / "runs").mkdir(parents=True)
    (old / "claim.json").write_text("{}")
    rc, lines = _cli(["claim", "--no-progress", "--out", str(old), "--analyse-only"], capsys)
    line = _one_line(lines, "claim")
    assert rc == 2 and "holds a claim of one arm" in line and "--optimizer sgd" in line, line
    assert sorted(p.name for p in old.iterdir()) == ["claim.json", "runs"]


# ------------------------------------------------------------------------------------------ measure
MEASURE = ["measure", "--no-progress", "--model", "vit_tiny_patch16_224", "--random-init", "--img-size", "32"]


@pytest.mark.parametrize("argv,needle", [
    (["measure", "--no-progress", "--pretrain-config", '{"epochs": -1}'], "DigitsConfig.epochs must be a"),
    (["measure", "--no-progress", "--pretrain-config", '{"img_size": 30}'], "a multiple of patch_size"),
    (["measure", "--no-progress", "--seed", HUGE_SEED], "--seed: must be an integer in 0..4294967295"),
])
def test_measure_bad_values_before_any_work(argv, needle, capsys, no_build, tmp_path):
    rc, lines = _cli([*argv, "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and needle in _one_line(lines, "measure")
    assert not (tmp_path / "o").exists()


def test_measure_cache_dir_that_is_a_file(tmp_path, capsys, no_build, monkeypatch):
    import vitplast.models.digits as digits

    monkeypatch.setattr(digits, "pretrain", lambda *a, **k: pytest.fail("pretrained before the check"))
    afile = tmp_path / "cache"
    afile.write_text("x")
    rc, lines = _cli(["measure", "--no-progress", "--cache-dir", str(afile)], capsys)
    assert rc == 2 and "--cache-dir" in _one_line(lines, "measure") and "not a directory" in lines[0]


def test_measure_undecodable_image_before_the_model_is_built(tmp_path, capsys, no_build):
    from PIL import Image

    for c in ("a", "b"):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(tmp_path / "imgs" / c / f"{i}.png")
    (tmp_path / "imgs" / "b" / "bad.png").write_bytes(b"not a png")
    argv = [*MEASURE, "--data", str(tmp_path / "imgs"), "--batch-size", "2", "--batches", "4"]
    rc, lines = _cli(argv, capsys)
    line = _one_line(lines, "measure")
    assert rc == 2 and "cannot read image" in line and "bad.png" in line


@pytest.mark.slow
def test_corrupt_pth_message_is_plain_text(tmp_path, capsys):
    path = tmp_path / "w.pth"
    torch.save({"model": {"x": torch.zeros(1)}, "cfg": Path("/x")}, path)
    rc, lines = _cli([*MEASURE, "--data", "synthetic", "--weights", str(path)], capsys)
    line = _one_line(lines, "measure")  # asserts no escape sequence
    assert rc == 2 and "holds Python objects other than tensors" in line and "PosixPath" in line


@pytest.mark.slow
def test_warnings_are_one_line_without_source(tmp_path):
    import subprocess
    import sys

    argv = [sys.executable, "-m", "vitplast.cli", *MEASURE, "--data", "synthetic", "--batch-size", "8",
            "--batches", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("vitplast measure: warning: ") for ln in lines), lines
    assert any("no weights given" in ln for ln in lines)


# ------------------------------------------------------------------------------------------ profile
def test_profile_model_without_preset_names_no_missing_option(tmp_path, capsys):
    argv = ["profile", "--device", "cpu", "--model", "resnet18", "--batch-size", "2",
            "--out", str(tmp_path / "p")]
    rc, lines = _cli(argv, capsys)
    line = _one_line(lines, "profile")
    assert rc == 2 and "components={" not in line and "no --component option" in line
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_profile_batch_beyond_memory(tmp_path, capsys):
    argv = ["profile", "--device", "cpu", "--batch-size", "100000000", "--out", str(tmp_path / "p")]
    rc, lines = _cli(argv, capsys)
    line = _one_line(lines, "profile")
    assert rc == 2 and "--batch-size 100000000" in line and "memory" in line
    assert not (tmp_path / "p").exists()


def test_out_of_memory_while_working_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    import vitplast.profile.command as profile_command

    def oom(args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore details")

    monkeypatch.setattr(profile_command, "run", oom)
    rc, lines = _cli(["profile", "--device", "cpu", "--out", str(tmp_path / "p")], capsys)
    line = _one_line(lines, "profile")
    assert rc == 1 and "out of memory" in line and "--batch-size" in line


# ------------------------------------------------------------------------------------------ Ctrl-C
@pytest.mark.parametrize("command,needle", [
    ("finetune", "--resume"),
    ("claim", "run the same command again"),
    ("measure", "nothing was written"),
    ("profile", "nothing was written"),
])
def test_ctrl_c_is_one_line_exit_130(command, needle, tmp_path, capsys, monkeypatch):
    import importlib

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    # the command's run (what the CLI calls once the options are parsed) interrupted
    monkeypatch.setattr(importlib.import_module(f"vitplast.{command}.command"), "run", interrupted)
    argv = [command, "--out", str(tmp_path / "o")] + (["--device", "cpu"] if command == "profile" else [])
    rc, lines = _cli(argv, capsys)
    line = _one_line(lines, command)
    assert rc == 130 and "interrupted" in line and needle in line


@pytest.mark.slow
def test_real_ctrl_c_during_finetune_then_resume(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from helpers import default_stops

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "vitplast.cli", "finetune", *FINETUNE, "--steps", "100000",
            "--checkpoint-every", "5", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=default_stops)  # Ctrl-C stops it even where SIGINT is ignored here
    try:
        deadline = time.monotonic() + 240
        while not (out / "checkpoint.pt").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert (out / "checkpoint.pt").exists()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 130 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("vitplast finetune: interrupted: ") and "--resume" in lines[0]
    assert json.loads((out / "config.json").read_text())["steps"] == 100000
    assert not (out / "summary.json").exists()
