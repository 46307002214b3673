"""Clean stops: SIGTERM and SIGHUP end a command the way Ctrl-C does, by an exception
(`Terminated`, a ``KeyboardInterrupt``) raised in the main thread, so every ``finally`` and
``with`` on the way out runs: worker processes and data loaders are stopped, files closed, semaphores
released. A second signal of the same kind ends the process at once (the default action), unless it
comes within ``SAME_STOP_S`` of the first: that is the same stop delivered twice (a signal to the
process group and the same one forwarded by a parent such as ``timeout`` or a closing terminal's shell),
and the command goes on stopping cleanly, its one line said.

A closed terminal sends SIGHUP to the whole process group, as Ctrl-C sends SIGINT: the command's
helpers leave both to the command. Its worker processes and data loaders ignore them (the command
stops them), and multiprocessing's resource tracker, which ignores SIGINT and SIGTERM by itself, is
started with SIGHUP blocked: it outlives the hangup, so the semaphores are released through it, and
nothing is left in ``/dev/shm``.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing import resource_tracker, util

STOP_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s)
HELD_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGHUP", None)) if s)
PR_SET_PDEATHSIG = 1  # linux/prctl.h
SAME_STOP_S = 1.0  # a second SIGTERM/SIGHUP this soon after the first is the same stop, sent twice
_stopped_at: dict[int, float] = {}  # when each stop signal was first raised as `Terminated`


class Terminated(KeyboardInterrupt):
    """The command was asked to stop by ``signum`` (SIGTERM, SIGHUP); its exit status is 128 + signum."""

    def __init__(self, signum: int) -> None:
        self.name = signal.Signals(signum).name
        super().__init__(self.name)
        self.signum = int(signum)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def _raise(signum: int, frame) -> None:
    _stopped_at[signum] = time.monotonic()
    signal.signal(signum, _again)
    raise Terminated(signum)


def _again(signum: int, frame) -> None:
    """A second SIGTERM/SIGHUP: the same stop sent twice when it comes within ``SAME_STOP_S`` (ignored),
    else the user insisting: the default action, at once."""
    if time.monotonic() - _stopped_at.get(signum, -math.inf) < SAME_STOP_S:
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def stops_as_exceptions() -> Iterator[None]:
    """Inside, SIGTERM and SIGHUP raise `Terminated` in the main thread (outside the main
    thread, where handlers cannot be set, nothing changes); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s, previous in saved.items():
        if previous in (signal.SIG_DFL, None) or previous is signal.default_int_handler:
            signal.signal(s, _raise)
    tracker_outlives_hangups()
    try:
        yield
    finally:
        for s, previous in saved.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(s, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Inside, SIGINT and SIGHUP are blocked in this thread (the main thread): a process started here
    (a worker) starts with them blocked, until it ignores them (`die_with_parent`); one sent meanwhile
    reaches this process when the block ends."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def tracker_outlives_hangups() -> None:
    """Starts multiprocessing's resource tracker now, with SIGHUP blocked (it keeps that mask), unless
    it runs already: a hangup of the process group then leaves it alive to release the semaphores of
    the command's workers (killed, it is relaunched empty and prints a traceback per semaphore)."""
    if hasattr(signal, "SIGHUP") and hasattr(signal, "pthread_sigmask"):
        with signals_held(), contextlib.suppress(OSError):
            resource_tracker.ensure_running()


def die_with_parent() -> None:
    """In a worker process (a data loader's, an executor's): a hangup (the terminal closed) is its
    parent's to handle, which stops it, so it ignores SIGHUP (then unblocks what `signals_held` held);
    and the kernel kills it when its parent dies (Linux ``PR_SET_PDEATHSIG``; elsewhere nothing: such
    workers watch their parent themselves)."""
    if hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _end_worker(signum: int, frame) -> None:
    signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(Exception):  # what a normal end of the process runs
        util._exit_function()
    os._exit(128 + signum)


def clean_worker_exit() -> None:
    """In an executor's worker process: SIGTERM (how the driver stops its workers) ends it at once,
    after multiprocessing's exit handlers, as a normal end would: the semaphores it holds are
    released and its own data-loading processes stopped, so nothing is leaked and nothing more is
    written; progress bars lock with a thread lock, not the semaphore tqdm creates by default."""
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _end_worker)
