"""The measurements ``vitplast compare`` reads: a ``plasticity.json`` file or a directory holding one,
each with the label it is shown under."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vitplast_kernels import PlasticityResult

from ..criteria.plasticity import KIND, VERSION, measurement_from_doc
from ..outputs.json_files import read_json_file
from ..outputs.result_files import CHECKSUM, ResultFileError, check_result_doc

RESULT_FILE = "plasticity.json"
KNOWN_FORMATS = (f"{KIND}/{VERSION}",)  # the format versions of plasticity.json this package reads


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
    """The result saved in ``path``; ValueError naming the file (and the field) when it is not one, has
    a format version this package does not know, carries a checksum its content does not match (a file
    that ``vitplast measure`` wrote, edited since; the kernels' own ``PlasticityResult.to_json`` writes
    none), or holds what no measurement can give (the scoring service's reader,
    `vitplast.criteria.plasticity.measurement_from_doc`)."""
    try:
        saved = read_json_file(path)
        written_by_measure = isinstance(saved, dict) and isinstance(saved.get("meta"), dict) and (
            "cache_key" in saved["meta"])
        if written_by_measure and CHECKSUM not in saved:  # vitplast measure always writes one: removed
            raise ResultFileError(path, CHECKSUM, "missing, though vitplast measure wrote the file (it "
                                  "carries a cache key): it was edited after it was written")
        if not isinstance(saved, dict) or "format" not in saved:
            raise ResultFileError(path, "format", "missing: not a plasticity result written by vitplast")
        if saved["format"] not in KNOWN_FORMATS:
            raise ResultFileError(path, "format", f"{saved['format']!r} is not one this version of vitplast "
                                  f"reads ({', '.join(KNOWN_FORMATS)}); a newer vitplast may have written it")
        if CHECKSUM in saved:  # written by vitplast measure: believed when it checks
            check_result_doc(saved, path, kind=KIND, versions=(VERSION,))
        return measurement_from_doc(saved, path)
    except ResultFileError as exc:
        where = f"{exc.field}: " if exc.field else ""
        raise ValueError(f"RUN {str(path)!r}: {where}{exc.reason}") from None
    except OSError as exc:
        raise ValueError(f"RUN {str(path)!r}: cannot be read ({type(exc).__name__}: {exc})") from None


def load_measurements(runs: list[str], labels: list[str] | None) -> list[Measurement]:
    """Every run read, labelled (default labels made unique by their position when two coincide)."""
    paths = [result_file(r) for r in runs]
    if labels is None:  # the name of the directory holding each file (its own stem when not plasticity)
        names = [p.parent.name if p.name == RESULT_FILE else p.stem for p in paths]
        labels = [n if names.count(n) == 1 else f"{n} ({i + 1})" for i, n in enumerate(names)]
    return [Measurement(n, p, read_result(p)) for n, p in zip(labels, paths, strict=True)]
