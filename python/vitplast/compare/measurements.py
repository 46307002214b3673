"""The measurements ``vitplast compare`` reads: a ``plasticity.json`` file or a directory holding one,
each with the label it is shown under."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import torch

from vitplast_kernels import PlasticityResult

from ..outputs.result_files import CHECKSUM, ResultFileError, read_result_json

RESULT_FILE = "plasticity.json"
KNOWN_FORMATS = ("vitplast-plasticity/1",)  # the format versions of plasticity.json this package reads


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
    """The result saved in ``path``; ValueError naming the file when it is not one, has a format
    version this package does not know, carries a checksum its content does not match (a file that
    ``vitplast measure`` wrote, edited since; the kernels' own ``PlasticityResult.save`` writes none), or
    sums no measurement can give (`check_sums`)."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"RUN {str(path)!r}: not a plasticity result written by vitplast "
                         f"({type(exc).__name__}: {exc})") from None
    written_by_measure = isinstance(saved, dict) and isinstance(saved.get("meta"), dict) and (
        "cache_key" in saved["meta"])
    if written_by_measure and CHECKSUM not in saved:  # vitplast measure always writes one: removed since
        raise ValueError(f"RUN {str(path)!r}: {CHECKSUM}: missing, though vitplast measure wrote the file "
                         "(it carries a cache key): it was edited after it was written")
    if isinstance(saved, dict) and CHECKSUM in saved:  # written by vitplast measure: believed when it checks
        kind, _, number = str(saved.get("format")).partition("/")
        try:
            read_result_json(path, kind=kind, versions={int(number)} if number.isdigit() else set())
        except ResultFileError as exc:
            where = f"{exc.field}: " if exc.field else ""
            raise ValueError(f"RUN {str(path)!r}: {where}{exc.reason}") from None
    version = saved.get("format") if isinstance(saved, dict) else None
    if version is not None and version not in KNOWN_FORMATS:  # None: not a result (from_dict says so)
        raise ValueError(f"RUN {str(path)!r}: format {version!r} is not one this version of vitplast reads "
                         f"({', '.join(KNOWN_FORMATS)}); a newer vitplast may have written it")
    try:
        result = PlasticityResult.from_dict(saved)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
        raise ValueError(f"RUN {str(path)!r}: not a plasticity result written by vitplast "
                         f"({type(exc).__name__}: {exc})") from None
    problem = check_sums(result)
    if problem:
        raise ValueError(f"RUN {str(path)!r}: inconsistent file: {problem}")
    return result


def check_sums(result: PlasticityResult) -> str | None:
    """What makes the saved sums impossible (a count that is negative or not whole, a non-finite sum, a
    sum of squares below what the sum implies: ``count * sumsq >= sum**2``), or None."""
    host = result.stats.detach().to("cpu", dtype=torch.float64)
    fields = list(result.stat_fields)
    for i, c in enumerate(result.components):
        for li, layer in enumerate(result.layers):
            row = dict(zip(fields, host[i, li].tolist(), strict=True))
            where = f"component {c} layer {layer}"
            for name in ("count", "identical", "nonfinite"):
                v = row.get(name, 0.0)
                if not math.isfinite(v) or v < 0 or v != round(v):
                    return f"{where}: {name} {v!r} is not a count (a whole number >= 0)"
            n, s1, s2 = row["count"], row["sum"], row["sumsq"]
            if not (math.isfinite(s1) and math.isfinite(s2)):
                return f"{where}: non-finite sums ({s1!r}, {s2!r})"
            if s1 < 0 or s2 < 0 or (n == 0 and (s1 or s2)) or n * s2 < s1 * s1 * (1 - 1e-9) - 1e-12:
                return (f"{where}: sums impossible for {int(n)} non-negative rates (sum {s1!r}, sum of "
                        f"squares {s2!r})")
    return None


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
