"""Hostile inputs and situations of the runtime (issue 33, items 3-8, 10-13): special files and link
loops in data folders, 16-bit and float images, validation before any file is written, runs that never
trained, stale temporaries, environment variables, unbounded workers, stops by signal, terminals that
cannot encode a character. One test per case; each failed on the code before the fix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from vitplast.cli import main
from vitplast.data.datasets import BadImageError, load_dataset

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


def _cli(argv, capsys):
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
    rc, _, err = _cli(["measure", "--data", str(tmp_path / "no-such-data"), "--out", str(out)], capsys)
    assert rc == 2 and len(err) == 1, err
    assert _tree(tmp_path) == []  # not even the parents of --out


def test_out_near_path_max_is_refused_before_anything_is_created(tmp_path, capsys):
    room = 4096 - len(str(tmp_path)) - 20  # the path fits, what a run writes below it would not
    parts = [("d" * 200)] * (room // 201) + ["e" * (room % 201 or 1)]
    out = tmp_path.joinpath(*parts)
    rc, _, err = _cli(["finetune", "--data", "synthetic", "--steps", "1", "--out", str(out)], capsys)
    assert rc == 2 and len(err) == 1 and "--out" in err[0] and "path limit" in err[0], err
    assert _tree(tmp_path) == []


def test_run_that_never_trained_is_replaced_without_resume(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(_Stop):  # fails before its first checkpoint (as a bad image would)
        _finetune(run, train="MHA", after_step=_stop_after(1))
    assert (run / "config.json").exists() and not (run / "checkpoint.pt").exists()
    result = _finetune(run, train="FC1", lr="0.02")  # the corrected command, no --resume
    assert len(result["runs"]) == 1 and (run / "summary.json").exists()
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
    with pytest.raises(RunDirError, match="1 unfinished.*FC1-lr0.05-s3.*--resume"):
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
    rc, _, err = _cli(["measure", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and len(err) == 1 and name in err[0] and accepts in err[0], err
    assert _tree(tmp_path) == []


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
    rc, _, err = _cli(["finetune", "--data", "synthetic", "--steps", "1", "--workers", str(too_many),
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
                            start_new_session=True)
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
