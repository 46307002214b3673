"""Atomic file writes: a file is either the old version or the complete new one, never a torn one."""

from __future__ import annotations

import contextlib
import csv
import errno
import math
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

# signals whose Python handlers (Ctrl-C's KeyboardInterrupt, a command's SIGTERM/SIGHUP handler) wait
# until a write is complete
DEFERRED_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None),
                                     getattr(signal, "SIGHUP", None)) if s is not None)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Inside, a Ctrl-C (or SIGTERM, SIGHUP) whose handler is Python code waits: it is recorded, and its
    handler runs (raising ``KeyboardInterrupt`` or whatever it raises) once the block has finished. An
    exception raised by a handler in the middle of a writer that calls back into Python (``torch.save``
    into a file object) can tear the writer's state and come out as an unrelated ``RuntimeError``; after
    the block it is the plain interruption, with the file complete. A second signal inside the block runs
    the handler at once (the user insists: the write is abandoned). Outside the main thread, where
    handlers cannot be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in DEFERRED_SIGNALS}
    saved = {s: h for s, h in saved.items() if callable(h)}
    pending: list[int] = []

    def record(signum: int, frame) -> None:
        if pending:
            saved[signum](signum, frame)
        pending.append(signum)

    for s in saved:
        signal.signal(s, record)
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    if pending:
        saved[pending[0]](pending[0], None)


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> None:
    """Writes ``path`` atomically: ``write(tmp)`` fills a temporary file in the same folder (its name
    ends with ``path``'s suffix, so writers that pick the format from it work), which is flushed to
    disk, given the usual permissions (``0o666 & ~umask``) and renamed onto ``path``. On any error the
    temporary file is removed and ``path`` is left as it was. Missing folders are created. A Ctrl-C
    (SIGTERM, SIGHUP) during the write is handled once the file is in place (`signals_deferred`)."""
    with signals_deferred():
        _atomic_write(path, write)


def _atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> None:
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    if os.path.isdir(path):  # os.replace would name the temporary file; say what is in the way
        raise IsADirectoryError(errno.EISDIR, "a directory is where this file is written; move it away",
                                path)
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
