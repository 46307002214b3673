"""An output directory written as a unit: a run's files appear together or not at all.

Usage:
    out = OutputSet("res/", owned=("plasticity.json", "plasticity.png", "run.json"))
    out.check()                          # before any work: ValueError naming the problem
    ...                                  # the measurement
    with out.writing() as tmp:           # a fresh directory beside res/
        write files into tmp
    # on success res/ is replaced by tmp in two renames; on error tmp is removed, res/ left as it was

The files are written into a temporary directory next to the target (same filesystem), which then
takes the target's place: the previous set is moved aside, the new one renamed in, the old one deleted.
A kill at any moment leaves the old set or the new one under the target name (or, between the two
renames, no target and both sets under hidden names), never files of two runs side by side. An existing
target is replaced only when it holds nothing but files this kind of run writes (``owned``), so a
directory of other files is never deleted; hidden leftovers of killed runs (``.NAME.tmp-PID-*``,
``.NAME.old-PID-*`` whose process is gone) are removed by the next run.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..outputs.paths import check_path_length, foreign_files, nearest_existing
from .lock import process_alive


class OutputSet:
    """A target directory and the file names a run owns there (see the module docstring)."""

    def __init__(self, target: str | os.PathLike, owned: tuple[str, ...]) -> None:
        self.target = Path(target).expanduser()
        self.owned = frozenset(owned)

    @property
    def parent(self) -> Path:
        return self.target.absolute().parent

    def _hidden(self, kind: str) -> str:
        return f".{self.target.name}.{kind}-{os.getpid()}-"

    def check(self) -> None:
        """Raises ``ValueError`` when the target cannot receive the set: an existing file, a directory holding
        files this run does not own, a path too long, or a parent that cannot be created or written to (tried
        by creating and removing a directory in its nearest existing ancestor). Creates nothing."""
        t = self.target
        if t.name in ("", ".", ".."):
            raise ValueError(f"--out {str(t)!r}: name a directory of its own (e.g. {str(t / 'results')!r})")
        if t.exists() and not t.is_dir():
            raise ValueError(f"--out {str(t)!r} is an existing file, not a directory")
        if foreign := foreign_files(t, self.owned):
            raise ValueError(f"--out {str(t)!r} holds files this run did not write "
                             f"({', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}): it would "
                             "replace the whole directory; give a new or empty one")
        check_path_length(t)  # before anything is created: a path too long leaves nothing behind
        existing = nearest_existing(self.parent)
        if not existing.is_dir():
            raise ValueError(f"--out {str(t)!r}: {str(existing)!r} is a file, not a directory")
        try:  # a read-only filesystem shows here: a directory created and removed where it would go
            probe = tempfile.mkdtemp(prefix=self._hidden("tmp"), dir=existing)
            os.rmdir(probe)
        except OSError as exc:
            raise ValueError(f"--out {str(t)!r}: cannot write into {str(existing)!r} "
                             f"({exc.strerror or exc})") from None

    def _sweep(self) -> None:
        """Removes hidden leftovers of this target whose writing process is gone."""
        for p in self.parent.glob(f".{self.target.name}.*-*-*"):
            kind, pid, _ = p.name[len(self.target.name) + 2:].split("-", 2)
            if kind in ("tmp", "old") and pid.isdigit() and not process_alive(int(pid)) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)

    @contextlib.contextmanager
    def writing(self) -> Iterator[Path]:
        """A temporary directory to fill; it replaces the target when the block ends without error
        (the target's missing parents are created now, not by `check`)."""
        self.parent.mkdir(parents=True, exist_ok=True)
        self._sweep()
        tmp = self._fresh_dir()
        try:
            yield tmp
            self._replace(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _fresh_dir(self) -> Path:
        """A new hidden directory beside the target, with the usual permissions (``os.mkdir`` applies
        the umask, unlike ``mkdtemp``'s 0700)."""
        while True:
            path = self.parent / f"{self._hidden('tmp')}{secrets.token_hex(4)}"
            with contextlib.suppress(FileExistsError):
                path.mkdir()
                return path

    def _replace(self, new: Path) -> None:
        old = None
        if self.target.exists():
            old = Path(tempfile.mkdtemp(prefix=self._hidden("old"), dir=self.parent))
            os.rmdir(old)
            os.rename(self.target, old)
        try:
            os.rename(new, self.target)
        except BaseException:
            if old is not None:
                os.rename(old, self.target)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(OSError):  # make the renames durable where the filesystem allows
            fd = os.open(self.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
