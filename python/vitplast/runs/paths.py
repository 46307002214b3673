"""Checks that a directory a command will write (``--out``, ``--cache-dir``) can be, before any work and
without creating anything: the path is a directory or can be made one, and this process may write there.
"""

from __future__ import annotations

import os
from pathlib import Path


def check_out_dir(path: str | os.PathLike, flag: str = "--out") -> Path:
    """``path`` as a directory to write: an existing directory this process can write into, or a path
    whose nearest existing parent is one. Raises ValueError naming ``flag`` otherwise (an existing file,
    a parent that is a file, no write permission); creates nothing."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise ValueError(f"{flag} {str(p)!r} is an existing file, not a directory")
    existing = p
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {str(p)!r}: {str(existing)!r} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "write into" if existing == p else "create directories in"
        raise ValueError(f"{flag} {str(p)!r}: cannot {what} {str(existing)!r} (permission denied)")
    return p


def foreign_files(path: str | os.PathLike, owned: set[str] | frozenset[str]) -> list[str]:
    """Names in the directory ``path`` (absent: none) that are not in ``owned``, sorted."""
    p = Path(path)
    if not p.is_dir():
        return []
    return sorted(q.name for q in p.iterdir() if q.name not in owned)
