"""``RunLock``: one writer per run directory.

The writer holds an exclusive ``flock`` on ``DIR/.lock``; the kernel releases it when the process ends,
however it ends, so a lock left by a killed run never blocks the next one. The file names the holder
(PID, host, start time): a second writer is refused with that name, and a writer that takes over a file
naming a process that is gone reports it (``stale``).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

LOCK = ".lock"


class RunDirError(ValueError):
    """A run directory cannot be used as asked (finished, unfinished without --resume, mismatch, in use)."""


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user
        return True
    return True


class RunLock:
    """An exclusive lock on a run directory (``DIR/.lock``, ``flock``), naming its holder.

    ``acquire()`` raises :class:`RunDirError` while another process (or another ``RunLock`` of this
    one) holds it; a lock file left by a process that is gone is taken over, and ``stale`` then holds
    what that file said (``{"pid": .., "host": .., "since": ..}``).
    """

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(directory) / LOCK
        self.stale: dict | None = None
        self._fd: int | None = None

    def _holder(self, fd: int) -> dict:
        try:
            text = os.pread(fd, 4096, 0).decode(errors="replace")
            return json.loads(text) if text.strip() else {}
        except (OSError, ValueError):
            return {}

    def acquire(self) -> RunLock:
        if self._fd is not None:
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = self._holder(fd)
            os.close(fd)
            who = "another process"
            if holder:
                who = (f"process {holder.get('pid', '?')} on {holder.get('host', '?')} since "
                       f"{holder.get('since', '?')}")
            raise RunDirError(f"{self.path.parent} is in use by {who} (lock {self.path}); wait for it to "
                              "finish or choose another --out") from None
        previous = self._holder(fd)
        if previous.get("pid") and not (previous.get("host") == socket.gethostname()
                                        and previous["pid"] == os.getpid()):
            here = previous.get("host") == socket.gethostname()
            self.stale = dict(previous, alive=process_alive(int(previous["pid"])) if here else None)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # no holder named any more; the (empty) file stays
        finally:
            os.close(fd)  # closing drops the flock
