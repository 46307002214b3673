"""Nothing in a run directory runs code when loaded, the workers of a killed
`vitplast claim` end with it and write nothing after it, and the recorded seed replays a measurement."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from helpers import Killed, file_tree, kill_after, pid_running, quiet
from vitplast.cli import main
from vitplast.finetune import finetune

ARCH = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16,
            model_kwargs=dict(patch_size=8, depth=2, embed_dim=32, num_heads=2))
ARCH_CLI = ["--model", "vit_tiny_patch16_224", "--random-init", "--img-size", "16", "--model-arg",
            "patch_size=8", "--model-arg", "depth=2", "--model-arg", "embed_dim=32", "--model-arg",
            "num_heads=2"]


class _Payload:
    """Unpickled by a full ``torch.load``, it runs ``touch MARKER``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _plant(checkpoint: Path, marker: Path) -> None:
    assert checkpoint.exists()
    torch.save({"step": 2, "model": {}, "payload": _Payload(marker)}, checkpoint)


def _quiet(*a, **k) -> None:
    pass


# ------------------------------------------------------------------------------------------ item 1
def test_finetune_resume_refuses_a_planted_pickle(tmp_path, capsys):
    run, marker = tmp_path / "run", tmp_path / "ran"
    opts = dict(**ARCH, data="synthetic", train="MHA", steps=4, batch_size=16, checkpoint_every=2,
                plots=False, progress=False)
    with pytest.raises(Killed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        finetune(**opts, out=str(run), after_step=kill_after(3), reporter=quiet())
    assert torch.load(run / "checkpoint.pt", weights_only=True)["step"] == 2  # tensors and plain values
    _plant(run / "checkpoint.pt", marker)
    argv = ["finetune", *ARCH_CLI, "--data", "synthetic", "--train", "MHA", "--steps", "4", "--batch-size",
            "16", "--checkpoint-every", "2", "--no-plots", "--no-progress", "--out", str(run), "--resume"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert str(run / "checkpoint.pt") in err[0] and "holds Python objects other than tensors" in err[0]
    assert "posix.system" in err[0] and "Weights only load failed" not in err[0]  # the refused global
    assert not marker.exists()  # the payload never ran


def test_claim_refuses_a_planted_pickle_in_a_run(tmp_path):
    from vitplast.claim import claim

    out, marker = tmp_path / "claim", tmp_path / "ran"
    opts = dict(**ARCH, threads=1, jobs=1, progress=False, pretrain_data="synthetic", data="synthetic",
                components="MHA,FC1,LN1", optimizer="sgd", lr="3e-3", seed="0", steps=4, batch_size=16,
                checkpoint_every=2,
                pairs=8, pair_batch=4, bootstrap=20, reporter=quiet())
    with pytest.raises(Killed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        claim(out=str(out), **opts, after_step=kill_after(3))
    ckpt = out / "runs" / "MHA-lr0.003-s0" / "checkpoint.pt"
    _plant(ckpt, marker)
    with (pytest.raises(ValueError, match="holds Python objects other than tensors") as exc,
          warnings.catch_warnings()):
        warnings.simplefilter("ignore")
        claim(out=str(out), **opts)
    assert str(ckpt) in str(exc.value)
    assert not marker.exists()


# ------------------------------------------------------------------------------------------ item 9
@pytest.mark.slow
def test_measure_replays_from_its_seed(tmp_path):
    from vitplast.measure import measure

    kw = dict(model="vit_tiny_patch16_224", random_init=True, img_size=32, data="synthetic", batch_size=16,
              batches=2, progress=False, reporter=quiet())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, global_seed in (("a", 1), ("b", 2)):  # whatever the caller's RNG state
            torch.manual_seed(global_seed)
            measure(out=str(tmp_path / name), **kw)
        measure(out=str(tmp_path / "c"), seed=7, **kw)
    first = (tmp_path / "a" / "plasticity.json").read_bytes()
    assert json.loads((tmp_path / "a" / "run.json").read_text())["seed"] == 0
    assert (tmp_path / "b" / "plasticity.json").read_bytes() == first  # bitwise
    assert (tmp_path / "c" / "plasticity.json").read_bytes() != first  # another seed, another init


def test_profile_model_is_the_same_every_time():
    from vitplast.options.fields import resolve
    from vitplast.profile import ProfileOptions
    from vitplast.profile.run import build_model_and_images

    opts = resolve(ProfileOptions, dict(model="vit_tiny_patch16_224", img_size=32, depth=1, dtype="float32",
                                        device="cpu", batch_size=2))
    states = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        model, _ = build_model_and_images(opts)
        states.append(model.state_dict())
    for k, v in states[0].items():
        assert torch.equal(v, states[1][k]), k


# ------------------------------------------------------------------------------------------ item 8
def _children(pid: int) -> list[int]:
    """PIDs of the spawned multiprocessing workers whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"spawn_main" in cmd:
            out.append(int(entry.name))
    return out




@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="--jobs 2 needs two cores")
def test_kill_9_of_claim_ends_its_workers(tmp_path):
    out = tmp_path / "claim"
    argv = [sys.executable, "-m", "vitplast.cli", "claim", *ARCH_CLI, "--pretrain-data", "synthetic",
            "--data", "synthetic", "--components", "MHA,FC1,LN1", "--optimizer", "sgd", "--lr", "3e-3",
            "--seed", "0,1",
            "--steps", "2000", "--batch-size", "16", "--checkpoint-every", "2", "--pairs", "8",
            "--pair-batch", "4", "--jobs", "2", "--threads", "1", "--no-progress", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            if len(workers) == 2 and list(out.glob("runs/*/checkpoint.pt")):
                break
            time.sleep(0.2)
        assert len(workers) == 2 and proc.poll() is None, "the claim's workers did not start training"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(pid_running(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(pid_running(w) for w in workers), "workers outlived the killed claim"
        before = file_tree(out)
        time.sleep(1.5)
        assert file_tree(out) == before  # nothing written after the claim died
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:  # on failure: the orphans this test started
            if pid_running(w):
                os.kill(w, signal.SIGKILL)
