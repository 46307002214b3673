"""Checks that a directory a command will write (``--out``, ``--cache-dir``) can be, before any work and
without creating anything: the path is a directory or can be made one, and this process may write there.
"""

from __future__ import annotations

import os
from pathlib import Path

# room kept below a directory a command writes, for the names it writes there (run directories of a
# grid, plots/, a temporary checkpoint ``.checkpoint.XXXXXXXX.tmp.pt``, ...)
ROOM_BELOW = 256


def nearest_existing(p: Path) -> Path:
    """``p``, or its nearest ancestor that exists (at most the root, or ``.``)."""
    return next(q for q in (p, *p.parents) if q.exists() or q.parent == q)


def _limit(path: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(path, name))
    except (OSError, ValueError):
        return default


def check_path_length(path: str | os.PathLike, flag: str = "--out", room: int = ROOM_BELOW) -> Path:
    """``path`` when the files a command writes below it fit the system's limits: each part at most
    ``NAME_MAX`` bytes, the whole absolute path with ``room`` bytes to spare at most ``PATH_MAX``;
    ValueError naming ``flag`` otherwise (checked before anything is created, so a path too long leaves
    no directory behind)."""
    p = Path(path).expanduser()
    existing = nearest_existing(p.absolute())
    name_max, path_max = _limit(existing, "PC_NAME_MAX", 255), _limit(existing, "PC_PATH_MAX", 4096)
    for part in p.parts:
        if len(os.fsencode(part)) > name_max:
            raise ValueError(f"{flag}: the name {part[:40]!r}... is {len(os.fsencode(part))} bytes long; "
                             f"this filesystem allows {name_max}")
    size = len(os.fsencode(str(p.absolute())))
    if size + room > path_max:
        raise ValueError(f"{flag} {str(p)[:60]!r}... is {size} bytes long: the files written below it would "
                         f"exceed the system's path limit ({path_max} bytes); choose a path under "
                         f"{path_max - room} bytes")
    return p


def check_out_dir(path: str | os.PathLike, flag: str = "--out") -> Path:
    """``path`` as a directory to write: an existing directory this process can write into, or a path
    whose nearest existing parent is one, short enough for what is written below it
    (`check_path_length`). Raises ValueError naming ``flag`` otherwise (an existing file, a parent
    that is a file, no write permission, a path too long); creates nothing."""
    p = check_path_length(path, flag)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{flag} {str(p)!r} is an existing file, not a directory")
    existing = nearest_existing(p)
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
