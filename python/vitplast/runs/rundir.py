"""A finetuning run directory: resolved config, metrics log, atomic checkpoints, resume, no overwrite.

Layout of ``DIR``:

    config.json      the resolved options (written once; a resume must match it)
    metrics.jsonl    one JSON record per line, appended (``{"iter": .., "step": .., "kind": .., ..}``)
    checkpoint.pt    the last checkpoint (model, optimiser, schedule, RNG states, step), replaced atomically
    summary.json     written last: its presence marks the run finished
    model.safetensors, adapter/   the finetuned weights (``--export``)
    plots/, tb/      figures and optional TensorBoard logs
    .lock            names the process writing the run (see `RunLock`)

Every file but ``metrics.jsonl`` is written to a temporary file in the same directory and moved into place
with ``os.replace``, so a killed run leaves either the old or the new version, never a torn one; the temporary
a killed write leaves (``.checkpoint.XXXXXXXX.tmp.pt``) is removed by the next writer. A directory whose run
never reached a checkpoint holds nothing to resume: it counts as new, and the next command replaces it (a
corrected command needs no ``--resume``). ``metrics.jsonl`` is appended line by line; a torn last line is
ignored when read, and a resume cuts the log back to the checkpoint's step so that the steps replayed are not
logged twice (without a checkpoint, to nothing: the run starts over).

One process writes a run directory at a time: the writer creates ``.lock`` atomically
(`vitplast.runs.lock.RunLock`, no ``flock``: it works on shared filesystems), so a live writer makes ``open``
fail with its PID and host (`RunBusy`), while a lock left by a killed run is taken over (the dead process it
names is reported). The writer confirms it still holds the lock before each checkpoint and before the summary.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitplast_kernels.atomic_io import atomic_write, atomic_write_bytes

from ..models.checkpoints import load_weights_only
from ..outputs.json_files import ResultFileError, read_json_file
from .lock import LOCK, RunBusy, RunDirError, RunLock
from .summary import RunSummary

__all__ = ["RunBusy", "RunDir", "RunDirError", "RunLock"]

CONFIG, METRICS, CHECKPOINT, SUMMARY = "config.json", "metrics.jsonl", "checkpoint.pt", "summary.json"

# options that may differ between a run and its resume without changing the results
RESUME_FREE_KEYS = frozenset({"resume", "progress", "tensorboard", "out", "plots", "device", "workers",
                              "export"})
# what a run's summary.json must say as its config.json does (what was trained)
SAME_AS_CONFIG = ("train", "lr", "seed")


_PARENT_PID: int | None = None  # set in worker processes (guard_writes): writes stop once it is gone


def guard_writes(parent_pid: int | None) -> None:
    """In a worker process: every later write to a run directory first checks that ``parent_pid`` is
    still this process's parent, and ends the process at once (``os._exit(1)``) when it is not, so a
    worker never writes after the process that started it died (None: no check)."""
    global _PARENT_PID
    _PARENT_PID = parent_pid


def check_parent() -> None:
    """Ends this process when `guard_writes` named a parent that is gone (a no-op otherwise)."""
    if _PARENT_PID is not None and os.getppid() != _PARENT_PID:
        os._exit(1)


# the name of a temporary of an atomic write of a run's file (``.STEM.XXXXXXXX.tmpSUFFIX``)
_TEMPORARY = re.compile(r"\.(config|metrics|checkpoint|summary|model)\.\w{8}\.tmp(\.\w+)?")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (temp file + ``os.replace``)."""
    data = (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode()
    check_parent()
    atomic_write_bytes(path, data)


def save_atomic(path: str | os.PathLike, obj: Any) -> None:
    """``torch.save(obj)`` to ``path`` atomically (vitplast_kernels.atomic_io)."""
    check_parent()
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def _json_default(o):
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, (Path, torch.device, torch.dtype)):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Records of a JSONL file; a torn (unparsable) final line from a killed writer is dropped. A bad
    line elsewhere (not JSON, not an object) is a ValueError naming the file and the line."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}: line {i + 1} of {len(lines)} is not valid JSON ({exc}); the file is "
                             "corrupt (only a killed writer's last line may be torn)") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}: line {i + 1} is a JSON {type(record).__name__}, not a record (object)")
        out.append(record)
    return out


def rng_state() -> dict:
    """Every RNG a training step may draw from (torch CPU and CUDA, numpy, python), as tensors and plain
    values only, so that a checkpoint loads with ``torch.load(weights_only=True)``."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    keys = torch.from_numpy(keys.astype(np.int64))
    state = {"torch": torch.get_rng_state(), "numpy": (kind, keys, int(pos), int(has_gauss), float(cached)),
             "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, *rest = state["numpy"]
    keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
    np.random.set_state((kind, keys.astype(np.uint32), *rest))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A run's ``checkpoint.pt``, read weights-only (`vitplast.models.checkpoints.load_weights_only`):
    tensors and plain values only (and numpy arrays, which RNG states may hold); nothing in it can run
    code. Raises `RunDirError` naming the file when it holds anything else or cannot be read."""
    path = Path(path)
    ckpt = load_weights_only(path, str(path), error=RunDirError,
                             objects_advice="vitplast finetune did not write it: remove it to restart the "
                                            "run from step 0, or choose another --out",
                             unreadable_advice="remove it to restart the run from step 0")
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("step"), int):
        raise RunDirError(f"{path} is not a vitplast finetune checkpoint (no step); remove it to restart the "
                          "run from step 0, or choose another --out")
    return ckpt


def config_differences(saved: dict, config: dict) -> list[str]:
    """``"key: saved A, now B"`` for every option in which a run directory's ``config.json`` (``saved``)
    differs from ``config`` (the options that do not change results, `RESUME_FREE_KEYS`, aside)."""
    config = json.loads(json.dumps(config, default=_json_default))  # as it would be saved: tuples -> lists
    return [f"{k}: saved {saved.get(k)!r}, now {config.get(k)!r}" for k in sorted(set(saved) | set(config))
            if k not in RESUME_FREE_KEYS and saved.get(k) != config.get(k)]


class RunDir:
    """One run's directory. ``open(config, resume)`` decides: start, resume, or refuse.

    After ``open``: ``.checkpoint`` is the loaded checkpoint (or None), ``.finished`` says whether
    the directory already holds a finished run (only possible with ``resume=True``).
    """

    def __init__(self, path: str | os.PathLike, *, writer: bool = True):
        self.path = Path(path)
        self.writer = writer  # False on DDP ranks > 0: they read, never write
        self.checkpoint: dict | None = None
        self.finished = False
        self.lock = RunLock(self.path)
        self._metrics_file = None
        self.config_path, self.metrics_path = self.path / CONFIG, self.path / METRICS
        self.checkpoint_path, self.summary_path = self.path / CHECKPOINT, self.path / SUMMARY

    # -- state of the directory -------------------------------------------------------------------
    def state(self) -> str:
        """``"new"`` (absent, empty, or a run that never reached a checkpoint: nothing to resume, so
        the next command replaces it), ``"finished"``, ``"partial"`` or ``"foreign"``."""
        if not self.path.exists() or all(p.name.startswith(LOCK) or _TEMPORARY.fullmatch(p.name)
                                         for p in self.path.iterdir()):
            return "new"
        if self.summary_path.exists():
            return "finished"
        if self.config_path.exists():
            return "partial" if self.checkpoint_path.exists() else "new"
        return "foreign"

    def _sweep(self) -> None:
        """Removes what a killed writer left half-done: temporaries of atomic writes (a checkpoint's
        ``.checkpoint.XXXXXXXX.tmp.pt``); and, of a run that never reached a checkpoint, its metrics
        (the run starts over). Only under the lock."""
        for p in self.path.iterdir():
            if _TEMPORARY.fullmatch(p.name) and p.is_file():
                p.unlink(missing_ok=True)
        if not self.summary_path.exists() and not self.checkpoint_path.exists():
            self.metrics_path.unlink(missing_ok=True)

    def open(self, config: dict, *, resume: bool = False) -> RunDir:
        """Prepare the directory for ``config``; refuse rather than overwrite another run's files, or
        while another process writes it. A writer holds the directory's lock until `close`."""
        try:
            if self.writer and self.state() != "foreign":  # a foreign directory is refused untouched
                self.path.mkdir(parents=True, exist_ok=True)
                self.lock.acquire()
                self._sweep()
            state = self.state()
            refusals = {"foreign": f"--out {self.path} exists, is not empty and holds no vitplast run (no "
                                   f"{CONFIG}); choose an empty or new directory"}
            if not resume:
                refusals.update(
                    finished=f"--out {self.path} already holds a finished run ({SUMMARY}); refusing to "
                             "overwrite it: choose another --out (or pass --resume to load its results)",
                    partial=f"--out {self.path} holds an unfinished run; pass --resume to continue it from "
                            "its last checkpoint, or choose another --out")
            if state in refusals:
                raise RunDirError(refusals[state])
            if state in ("finished", "partial"):
                if diffs := config_differences(self.saved_config(), config):
                    raise RunDirError(f"--resume: the options differ from the run in {self.path}: "
                                      + "; ".join(diffs))
                self.finished = state == "finished"
                if self.checkpoint_path.exists():
                    self.checkpoint = load_checkpoint(self.checkpoint_path)
                if self.writer and not self.finished:  # no checkpoint: the run starts over, no record kept
                    self.truncate_metrics(self.checkpoint["step"] if self.checkpoint else -1)
            elif self.writer:
                write_json_atomic(self.config_path, config)
            return self
        except BaseException:
            self.close()
            raise

    def saved_config(self) -> dict:
        """The run's ``config.json`` (`JSONFileError` naming the file when it is not valid JSON)."""
        return read_json_file(self.config_path)

    # -- metrics ----------------------------------------------------------------------------------
    def log(self, record: dict) -> None:
        """Append one record to ``metrics.jsonl`` (flushed; fsynced at each checkpoint)."""
        if not self.writer:
            return
        check_parent()
        if self._metrics_file is None:
            self._metrics_file = open(self.metrics_path, "a")  # noqa: SIM115 - kept open for the run
        self._metrics_file.write(json.dumps(record, default=_json_default, allow_nan=True) + "\n")
        self._metrics_file.flush()

    def metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_path)

    def truncate_metrics(self, next_iter: int) -> None:
        """Keep only records of iterations before ``next_iter`` (field ``iter``; atomic rewrite): a
        resume replays the iterations from ``next_iter`` on, and logs them again."""
        if not self.metrics_path.exists():
            return
        kept = "".join(json.dumps(r, default=_json_default) + "\n" for r in self.metrics()
                       if r.get("iter", -1) < next_iter)
        check_parent()
        atomic_write_bytes(self.metrics_path, kept.encode())

    # -- checkpoints and summary ------------------------------------------------------------------
    def save_checkpoint(self, state: dict) -> None:
        """Atomically replace ``checkpoint.pt`` with ``state`` (which must hold ``"step"``)."""
        if not self.writer:
            return
        self.lock.confirm()
        if self._metrics_file is not None:
            os.fsync(self._metrics_file.fileno())
        save_atomic(self.checkpoint_path, state)

    def write_summary(self, summary: RunSummary | dict) -> RunSummary:
        """Write ``summary.json`` (marks the run finished; `vitplast.runs.summary`, checked as it
        will be read back); returns the `RunSummary`."""
        self.lock.confirm()  # a no-op for a reader, which holds no lock
        summary = RunSummary.of(summary, self.summary_path)
        if self.writer:
            summary.write(self.summary_path)
        return summary

    def summary(self) -> dict:
        """The run's summary as its fields, checked (`RunSummary.read`: ResultFileError naming the file
        and the field), and agreeing with the run's ``config.json`` on what was trained (train, lr, seed):
        a summary edited with its checksum recomputed is believed only as the run it says it is."""
        summary = RunSummary.read(self.summary_path)
        config = self.saved_config() if self.config_path.is_file() else None
        for name in SAME_AS_CONFIG if isinstance(config, dict) else ():
            said, ran = getattr(summary, name), config.get(name)
            same = said == ran or (isinstance(ran, float) and isinstance(said, float)
                                   and math.isclose(said, ran, rel_tol=1e-12))
            if ran is not None and not same:
                raise ResultFileError(self.summary_path, name, f"{said!r} disagrees with {self.config_path}, "
                                      f"which the run was trained with ({ran!r})")
        return summary.to_json()

    def close(self) -> None:
        """Closes the metrics file and releases the directory's lock (the end of this writer's session)."""
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
        self.lock.release()
