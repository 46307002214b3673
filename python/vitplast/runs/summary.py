"""A finetuning run's summary (``summary.json``, written last: its presence marks the run finished), as
the one typed record that `vitplast finetune` writes and `claim`, the finetune grid's table and the
aggregate read back.

The file is a result file (`vitplast.outputs.result_files`): its format (``vitplast-run-summary/1``)
and the checksum of its content are checked when it is read, then every field: accuracies in [0, 1]
(``holdout_acc`` null without ``--holdout``), counts integers >= 0, the learning rate positive and
finite, wall time finite and >= 0 or null (a resumed run), plasticity rates finite and >= 0 or null.
A file that fails is refused with `ResultFileError` (a ValueError: rc 2 on the command line) naming the
file and the field; a summary written before the format carried a checksum is refused by name with
its version, so that the run is rerun rather than believed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

from ..outputs import result_files
from ..outputs.result_files import ResultFileError, checked_number, count, field

KIND = "vitplast-run-summary"
VERSION = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSummary:
    """What one finished run reports: its ``train``, ``lr`` and ``seed``, the parts it trained, its
    accuracies (``final_acc`` after the last step, ``best_acc`` the best evaluation, ``initial_acc``
    before finetuning, ``holdout_acc`` on the images ``--holdout`` kept out of training or None), the
    plasticity of each component when it started (or None), its trainable and total parameter counts,
    steps, world size, wall time (None when resumed), directory, model and data, the reproducibility
    record and, with ``--train auto``, what was chosen. ``reused``: read back from a run finished before
    (not a field of the file). The fields are in the order ``summary.json`` holds them."""

    train: str
    lr: float
    seed: int
    trained: tuple[str, ...] = ()
    final_acc: float
    best_acc: float | None = None
    initial_acc: float
    holdout_acc: float | None = None
    plasticity_start: dict[str, float | None] | None = None
    trainable_params: int
    total_params: int | None = None
    steps: int | None = None
    world_size: int = 1
    seconds: float | None = None
    run_dir: str = ""
    model: str | None = None
    data: str | None = None
    provenance: dict | None = None
    auto: dict | None = None
    reused: bool = False

    def to_json(self) -> dict:
        """The fields as ``summary.json`` holds them (``auto`` only when set; non-finite rates null)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "reused"}
        out["trained"] = list(self.trained)
        if self.plasticity_start is not None:
            out["plasticity_start"] = {c: v if v is not None and math.isfinite(v) else None
                                       for c, v in self.plasticity_start.items()}
        if self.auto is None:
            del out["auto"]
        return out

    @classmethod
    def from_json(cls, doc: dict, path: str | os.PathLike = "summary.json") -> RunSummary:
        """The summary of ``doc`` (a ``summary.json``'s content, or a run's result in memory) after
        checking every field's type and range; `ResultFileError` naming ``path`` and the field."""
        def opt(key: str, kind) -> Any:
            return None if doc.get(key) is None else field(doc, key, path, kind)

        def acc(key: str, nullable: bool = False) -> float | None:
            value = doc.get(key) if nullable else field(doc, key, path)
            return _or_none(checked_number(value, path, key, lo=0.0, hi=1.0, nullable=nullable))

        def opt_count(key: str) -> int | None:
            return None if doc.get(key) is None else count(doc[key], path, key)

        plast = opt("plasticity_start", dict)
        if plast is not None:
            plast = {str(c): _or_none(checked_number(v, path, f"plasticity_start.{c}", lo=0.0, nullable=True))
                     for c, v in plast.items()}
        seconds = checked_number(doc.get("seconds"), path, "seconds", lo=0.0, nullable=True)
        trained = opt("trained", list) or []
        if not all(isinstance(t, str) for t in trained):
            raise ResultFileError(path, "trained", "holds a value that is not a name")
        return cls(
            train=field(doc, "train", path, str),
            lr=checked_number(field(doc, "lr", path), path, "lr", lo=math.ulp(0.0)),
            seed=int(checked_number(field(doc, "seed", path, int), path, "seed")),
            final_acc=acc("final_acc"), initial_acc=acc("initial_acc"),
            trainable_params=count(field(doc, "trainable_params", path), path, "trainable_params"),
            best_acc=acc("best_acc", nullable=True), holdout_acc=acc("holdout_acc", nullable=True),
            trained=tuple(trained), plasticity_start=plast, total_params=opt_count("total_params"),
            steps=opt_count("steps"), world_size=count(doc.get("world_size", 1), path, "world_size"),
            seconds=_or_none(seconds), run_dir=str(doc.get("run_dir") or ""), model=opt("model", str),
            data=opt("data", str), provenance=opt("provenance", dict), auto=opt("auto", dict),
            reused=bool(doc.get("reused", False)))

    def write(self, path: str | os.PathLike) -> str:
        """Writes ``summary.json`` at ``path`` atomically with its format and checksum; returns the
        checksum."""
        return result_files.write_result_json(path, self.to_json(), kind=KIND, version=VERSION, indent=2)

    @classmethod
    def read(cls, path: str | os.PathLike) -> RunSummary:
        """The summary saved at ``path``, checked (`from_json`); `ResultFileError` otherwise."""
        try:
            doc, _ = result_files.read_result_json(path, kind=KIND, versions=(VERSION,))
        except ResultFileError as exc:
            if exc.field == "format" and "format" not in _raw_keys(path):
                raise ResultFileError(path, "format", f"missing: a summary written before {KIND}/{VERSION} "
                                      "(no version, no checksum), which this release does not believe; "
                                      "rerun the run") from None
            raise
        return cls.from_json(doc, path)

    @classmethod
    def of(cls, summary: RunSummary | dict, path: str | os.PathLike = "a run's summary") -> RunSummary:
        """``summary`` as a `RunSummary` (a run's result in memory is checked as its file would be;
        ``path``: what an error names)."""
        if isinstance(summary, RunSummary):
            return summary
        return cls.from_json(json.loads(json.dumps(summary, default=_plain)), path)


def _plain(o):
    """A tensor or NumPy value as JSON (a run's summary in memory may hold them)."""
    return o.tolist() if hasattr(o, "tolist") else str(o)


def _or_none(v: float) -> float | None:
    return None if math.isnan(v) else v


def _raw_keys(path) -> set:
    """The top-level keys of the JSON object at ``path`` (none when it is not one)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return set(doc) if isinstance(doc, dict) else set()
