"""Atomic file writes: a file is either the old version or the complete new one, never a torn one."""

from __future__ import annotations

import contextlib
import csv
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> None:
    """Writes ``path`` atomically: ``write(tmp)`` fills a temporary file in the same folder (its name
    ends with ``path``'s suffix, so writers that pick the format from it work), which is flushed to
    disk, given the usual permissions (``0o666 & ~umask``) and renamed onto ``path``. On any error the
    temporary file is removed and ``path`` is left as it was. Missing folders are created."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    stem, suffix = os.path.splitext(os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=f".tmp{suffix}", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write)


def atomic_write_csv(path: str | os.PathLike, rows: Sequence[Mapping]) -> None:
    """Writes ``rows`` (dicts with the same keys) as CSV atomically: a header row from the first row's
    keys, then one line per row; a non-finite float (an undefined value) is an empty cell."""

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=list(rows[0]))
            out.writeheader()
            for r in rows:
                out.writerow({k: "" if isinstance(v, float) and not math.isfinite(v) else v
                              for k, v in r.items()})

    atomic_write(path, write)
