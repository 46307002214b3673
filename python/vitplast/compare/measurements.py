"""The measurements ``vitplast compare`` reads: a ``plasticity.json`` file or a directory holding one,
each with the label it is shown under."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from vitplast_kernels import PlasticityResult

RESULT_FILE = "plasticity.json"


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One compared run: its label, the file read and the result."""

    label: str
    path: Path
    result: PlasticityResult


def result_file(run: str) -> Path:
    """The ``plasticity.json`` of ``run`` (the file itself, or the one inside a directory); ValueError
    saying what to do when there is none."""
    path = Path(run).expanduser()
    if path.is_dir():
        if (path / RESULT_FILE).is_file():
            return path / RESULT_FILE
        hint = ""
        if (path / "metrics.jsonl").is_file():  # a vitplast finetune run directory
            hint = (f": it is a finetune run; measure its weights first: vitplast measure --weights {run} "
                    f"--out {run}-measured")
        raise ValueError(f"RUN {run!r}: no {RESULT_FILE} in this directory{hint}")
    if not path.exists():
        raise FileNotFoundError(f"RUN {run!r}: no such file or directory")
    return path


def read_result(path: Path) -> PlasticityResult:
    """The result saved in ``path``; ValueError naming the file when it is not one."""
    try:
        return PlasticityResult.from_json(path)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"RUN {str(path)!r}: not a plasticity result written by vitplast "
                         f"({type(exc).__name__}: {exc})") from None


def default_label(path: Path) -> str:
    """The name of the directory holding ``path`` (the file's own stem when that is not plasticity)."""
    return path.parent.name if path.name == RESULT_FILE else path.stem


def load_measurements(runs: list[str], labels: list[str] | None) -> list[Measurement]:
    """Every run read, labelled (default labels made unique by their position when two coincide)."""
    paths = [result_file(r) for r in runs]
    names = list(labels) if labels is not None else [default_label(p) for p in paths]
    if labels is None:
        names = [n if names.count(n) == 1 else f"{n} ({i + 1})" for i, n in enumerate(names)]
    return [Measurement(n, p, read_result(p)) for n, p in zip(names, paths, strict=True)]
