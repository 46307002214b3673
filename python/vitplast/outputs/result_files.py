"""Result files a command writes and may read back (criterion scores, measurements, run summaries, claim
caches): JSON objects that carry their format and version (``"format": "KIND/VERSION"``) and a checksum
of their content (``"checksum": "sha256:..."``, over the canonical JSON of every other field).

`write_result_json` writes one atomically; `read_result_json` is the one place that opens one: it
refuses, with a `ResultFileError` naming the file and the field, a file that is not JSON, not an object,
of another kind or an unknown version, or whose checksum does not match its content (edited or damaged).
The typed results' ``from_json`` add their schema and range checks with `field`, `checked_number` and
`count`, so that every refusal reads ``FILE: FIELD: what is wrong``. A cache that fails is recomputed by
its caller (one line naming the file and the reason); an input that fails is refused (rc 2).

A file edited by hand with its checksum recomputed is read as the user's own decision; commands record
the files they reused with their checksums (`ReusedFile`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from vitplast_kernels.atomic_io import atomic_write_bytes

from .json_files import ResultFileError, loads_named

__all__ = ["ResultFileError", "ReusedFile", "check_result_doc", "checked_number", "content_checksum", "count",
           "field", "read_result_json", "with_checksum", "write_result_json"]

CHECKSUM = "checksum"
FORMAT = "format"


@dataclasses.dataclass(frozen=True)
class ReusedFile:
    """A result file a command read back instead of computing it again, and the checksum it had."""

    path: str
    checksum: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def content_checksum(payload: Mapping) -> str:
    """``sha256:HEX`` of ``payload``'s canonical JSON (sorted keys, no spaces), its checksum field left
    out."""
    body = {k: v for k, v in payload.items() if k != CHECKSUM}
    return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                                 default=str).encode()).hexdigest()


def with_checksum(payload: Mapping, *, kind: str, version: int) -> dict:
    """``payload`` with its ``format`` (``KIND/VERSION``) and ``checksum`` fields set."""
    out = {FORMAT: f"{kind}/{version}", **{k: v for k, v in payload.items() if k not in (FORMAT, CHECKSUM)}}
    out[CHECKSUM] = content_checksum(out)
    return out


def write_result_json(path: str | os.PathLike, payload: Mapping, *, kind: str, version: int,
                      indent: int | None = 1) -> str:
    """Writes ``payload`` with its format and checksum to ``path`` atomically; returns the checksum."""
    doc = with_checksum(payload, kind=kind, version=version)
    atomic_write_bytes(path, (json.dumps(doc, indent=indent, default=str) + "\n").encode())
    return doc[CHECKSUM]


def read_result_json(path: str | os.PathLike, *, kind: str, versions: Collection[int]) -> tuple[dict, int]:
    """``(payload, version)`` of the result file at ``path`` after checking that it is a JSON object of
    ``kind`` in one of ``versions`` whose checksum matches its content; `ResultFileError` otherwise
    (a missing file included)."""
    p = Path(path)
    if not p.is_file():
        raise ResultFileError(p, "", "no such file" if not p.exists() else "not a regular file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ResultFileError(p, "", f"cannot be read ({exc.__class__.__name__}: {exc})") from None
    doc = loads_named(data, p)  # a JSONFileError (a ResultFileError) naming the file when not JSON
    return doc, check_result_doc(doc, p, kind=kind, versions=versions)


def check_result_doc(doc: Any, path: str | os.PathLike, *, kind: str, versions: Collection[int]) -> int:
    """The version of ``doc``, the parsed content of the result file at ``path``, after checking that it
    is an object of ``kind`` in one of ``versions`` whose checksum matches its content (what
    `read_result_json` checks once it has parsed the file); `ResultFileError` otherwise."""
    if not isinstance(doc, dict):
        raise ResultFileError(path, "", f"a JSON {type(doc).__name__}, not an object")
    fmt = doc.get(FORMAT)
    prefix = f"{kind}/"
    if not isinstance(fmt, str) or not fmt.startswith(prefix) or not fmt[len(prefix):].isdigit():
        raise ResultFileError(path, FORMAT, f"{fmt!r} is not a {kind} file (expected {kind}/VERSION)")
    version = int(fmt[len(prefix):])
    if version not in versions:
        known = ", ".join(f"{kind}/{v}" for v in sorted(versions))
        raise ResultFileError(path, FORMAT, f"version {fmt!r} is not read by this release (it reads "
                              f"{known}); rerun the command that wrote it")
    saved = doc.get(CHECKSUM)
    if not isinstance(saved, str):
        raise ResultFileError(path, CHECKSUM, "missing: the file carries no checksum of its content")
    if saved != content_checksum(doc):
        raise ResultFileError(path, CHECKSUM, "does not match the content: the file was edited or damaged "
                              "after it was written")
    return version


def field(doc: Mapping, key: str, path: str | os.PathLike, kind: type | tuple[type, ...] = object,
          where: str = "") -> Any:
    """``doc[key]`` when present and of ``kind``; `ResultFileError` naming ``where.key`` otherwise."""
    name = f"{where}.{key}" if where else key
    if not isinstance(doc, Mapping) or key not in doc:
        raise ResultFileError(path, name, "missing")
    value = doc[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    wrong = not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
    if object not in kinds and wrong:
        want = " or ".join(t.__name__ for t in kinds)
        raise ResultFileError(path, name, f"is a {type(value).__name__}, expected {want}")
    return value


def checked_number(value: Any, path: str | os.PathLike, name: str, *, lo: float = -math.inf,
                   hi: float = math.inf, nullable: bool = False) -> float:
    """``value`` as a float within ``[lo, hi]`` (``None``: NaN when ``nullable``); `ResultFileError`
    naming ``name`` otherwise (a non-number, a non-finite number, one out of range)."""
    if value is None and nullable:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ResultFileError(path, name, f"{value!r} is not a number")
    v = float(value)
    if not math.isfinite(v):
        raise ResultFileError(path, name, f"{value!r} is not finite")
    if not lo <= v <= hi:
        raise ResultFileError(path, name, f"{value!r} is outside [{lo:g}, {hi:g}]")
    return v


def count(value: Any, path: str | os.PathLike, name: str) -> int:
    """``value`` as a count (an integer ≥ 0); `ResultFileError` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ResultFileError(path, name, f"{value!r} is not a count (an integer >= 0)")
    return int(value)
