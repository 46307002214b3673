"""``RunLock``: one writer per run directory, on local disks and shared filesystems alike.

The writer creates ``DIR/.lock`` atomically: it writes its name (host, boot, PID, the process's start time, an
attempt token, the node) into a file of its own and hard-links that file to ``.lock``, which fails when
``.lock`` exists, on a local disk as on NFS or Lustre (where hard links are refused, ``O_CREAT | O_EXCL`` does
the same). Nothing depends on ``flock``, which shared filesystems emulate, ignore or refuse. While it holds
the lock, a thread of the writer touches the file every `HEARTBEAT_S` seconds; release removes it.

A lock file whose writer is gone (a killed process, a dead node) is taken over:

- a holder on this host (same host name and boot) is gone when its PID no longer runs the process that
  wrote the file (PID and start time compared, so a reused PID does not count);
- a holder on another host is gone when its file has not been touched for `STALE_AFTER_S`;
- an executor that retries a run after its worker or node died names the attempts it replaces
  (`attempt`): locks those attempts hold are taken over at once, wherever they ran.

A takeover is atomic too: the stale file is renamed to a name of the taker's own and removed, or put back when
it turns out not to be the file judged stale (someone else took over in between). A writer confirms it still
holds its lock before each checkpoint (`RunLock.confirm`), so a writer whose lock was taken over stops instead
of writing beside the new one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

LOCK = ".lock"
HEARTBEAT_S = 10.0  # how often a holder touches its lock file
STALE_AFTER_S = 60.0  # a lock of another host untouched this long is a dead writer's


class RunDirError(ValueError):
    """A run directory cannot be used as asked (finished, unfinished without --resume, mismatch, in use)."""


class RunBusy(RunDirError):
    """The run directory is held by a writer that is still alive (``holder``: what its lock file says)."""

    def __init__(self, message: str, holder: dict) -> None:
        super().__init__(message)
        self.holder = holder

    def __reduce__(self):  # crosses process boundaries (executors) with its holder
        return type(self), (str(self), self.holder)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """Who takes a lock: an attempt token (written into the lock), the tokens of earlier attempts of the
    same run that are known dead (their locks are taken over at once), and the node it runs on."""

    token: str
    supersedes: tuple[str, ...] = ()
    node: str | None = None


_ATTEMPT: Attempt | None = None


@contextlib.contextmanager
def attempt(token: str, supersedes: tuple[str, ...] = (), node: str | None = None) -> Iterator[Attempt]:
    """Locks taken inside the block carry ``token`` and ``node``, and take over locks held by the
    attempts ``supersedes`` names (an executor's retry of a run whose worker died)."""
    global _ATTEMPT
    previous, _ATTEMPT = _ATTEMPT, Attempt(token, tuple(supersedes), node)
    try:
        yield _ATTEMPT
    finally:
        _ATTEMPT = previous


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (one of another user counts; a zombie, which has ended
    and waits for its parent to read its status, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc: it exists


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, Linux), None where unknown."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def same_host(holder: dict) -> bool:
    """Whether ``holder`` (a lock file's content) was written on this host, in this boot."""
    boot = _boot_id()
    return holder.get("host") == socket.gethostname() and (holder.get("boot") in (None, boot) or boot is None)


def holder_gone(holder: dict, age_s: float, supersedes: tuple[str, ...] = ()) -> bool:
    """Whether the writer a lock file names (``holder``, untouched for ``age_s`` seconds) is gone."""
    if holder.get("token") is not None and holder["token"] in supersedes:
        return True
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return age_s > HEARTBEAT_S  # empty or torn: a writer that died creating it (older than a beat)
    if same_host(holder):
        start = holder.get("start")
        return not process_alive(pid) or (start is not None and _start_ticks(pid) not in (None, start))
    return age_s > STALE_AFTER_S


def describe(holder: dict) -> str:
    """``process PID on HOST since TIME`` (what a refusal or a takeover names)."""
    if not holder.get("pid"):
        return "another process"
    return f"process {holder['pid']} on {holder.get('host', '?')} since {holder.get('since', '?')}"


class _Heartbeat:
    """One daemon thread per process touching every lock file this process holds."""

    def __init__(self) -> None:
        self.paths: set[Path] = set()
        self.guard = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, path: Path) -> None:
        with self.guard:
            self.paths.add(path)
            if self.thread is None or not self.thread.is_alive():  # none yet, or a forked child's copy
                self.thread = threading.Thread(target=self._beat, name="vitplast-lock-heartbeat", daemon=True)
                self.thread.start()

    def discard(self, path: Path) -> None:
        with self.guard:
            self.paths.discard(path)

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with self.guard:
                paths = list(self.paths)
            for p in paths:
                with contextlib.suppress(OSError):
                    os.utime(p)


_HEARTBEAT = _Heartbeat()


class RunLock:
    """The lock of one run directory (``DIR/.lock``), naming its holder (see the module docstring).

    ``acquire()`` raises `RunBusy` while a live writer (another process, or another ``RunLock``
    of this one) holds it; a lock file left by a writer that is gone is taken over, and ``stale`` then
    holds what that file said (``{"pid", "host", "since", ..., "alive"}``).
    """

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(directory) / LOCK
        self.stale: dict | None = None
        self.me: dict | None = None

    def read(self) -> tuple[dict, float] | None:
        """``(holder, seconds since the file was last touched)``, or None when there is no lock file."""
        try:
            age = max(0.0, time.time() - self.path.stat().st_mtime)
            holder = json.loads(self.path.read_text(errors="replace") or "{}")
        except FileNotFoundError:
            return None
        except ValueError:  # torn or not JSON
            holder = {}
        return (holder if isinstance(holder, dict) else {}), age

    def holder(self, supersedes: tuple[str, ...] = ()) -> dict | None:
        """What a live holder's lock file says, or None when the lock is free or its writer gone (or one
        of the attempts ``supersedes`` names)."""
        found = self.read()
        return None if found is None or holder_gone(*found, supersedes) else found[0]

    def acquire(self) -> RunLock:
        if self.me is not None:
            return self
        current = _ATTEMPT or Attempt(secrets.token_hex(8))
        me = {"pid": os.getpid(), "host": socket.gethostname(), "boot": _boot_id(),
              "start": _start_ticks(os.getpid()), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "token": current.token, "node": current.node}
        for _ in range(5):  # a takeover can race another taker: try again
            if self._create(me):
                self.me = me
                _HEARTBEAT.add(self.path)
                return self
            if (found := self.read()) is None:
                continue
            if not holder_gone(*found, current.supersedes):
                raise RunBusy(f"{self.path.parent} is in use by {describe(found[0])} (lock {self.path}); "
                              "wait for it to finish or choose another --out", found[0])
            self._take_over(found[0], current.token)
        raise RunDirError(f"{self.path.parent}: could not take its lock {self.path} (other processes kept "
                          "taking it over); try again")

    def _create(self, me: dict) -> bool:
        """Creates the lock file naming ``me``, atomically; False when it exists."""
        tmp = self.path.with_name(f"{LOCK}.{me['token']}.{secrets.token_hex(4)}.tmp")
        tmp.write_text(json.dumps(me))
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        except OSError as exc:  # no hard links on this filesystem: an exclusive create (O_CREAT | O_EXCL)
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS):
                raise
            try:
                with open(self.path, "x") as f:
                    f.write(json.dumps(me))
                return True
            except FileExistsError:
                return False
        finally:
            tmp.unlink(missing_ok=True)

    def _take_over(self, holder: dict, token: str) -> None:
        """Removes the stale lock file ``holder`` names, unless another process replaced it meanwhile."""
        aside = self.path.with_name(f"{LOCK}.{token}.stale")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        try:
            moved = json.loads(aside.read_text() or "{}")
        except ValueError:
            moved = {}
        if moved != holder:  # a fresh lock of someone who took over first: give it back
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
        else:
            self.stale = dict(holder, alive=False if same_host(holder) else None)
        aside.unlink()

    def confirm(self) -> None:
        """Raises `RunDirError` when this lock was taken over (its file names another writer)."""
        if self.me is not None and not self._mine(found := self.read()):
            raise RunDirError(f"{self.path.parent}: its lock was taken over by "
                              f"{describe(found[0]) if found else 'nobody'}; this writer stops")

    def _mine(self, found: tuple[dict, float] | None) -> bool:
        return (found is not None and found[0].get("token") == self.me["token"]
                and found[0].get("pid") == self.me["pid"])

    def release(self) -> None:
        if self.me is None:
            return
        _HEARTBEAT.discard(self.path)
        if self._mine(self.read()):
            self.path.unlink(missing_ok=True)
        self.me = None


@contextlib.contextmanager
def holding(directory: str | os.PathLike, *, hold: bool = True) -> Iterator[None]:
    """``directory`` (created if missing) held by this process while the block runs: its ``.lock``
    acquired (`RunLock.acquire`: RunBusy naming a live holder), released at the end; nothing taken
    when not ``hold``."""
    if not hold:
        yield
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    lock = RunLock(directory).acquire()
    try:
        yield
    finally:
        lock.release()
