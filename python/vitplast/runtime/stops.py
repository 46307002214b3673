"""Clean stops: SIGTERM and SIGHUP end a command the way Ctrl-C does, by an exception
(`Terminated`, a ``KeyboardInterrupt``) raised in the main thread, so every ``finally`` and
``with`` on the way out runs: worker processes and data loaders are stopped, files closed, semaphores
released. A second signal of the same kind ends the process at once (the default action).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

STOP_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s)


class Terminated(KeyboardInterrupt):
    """The command was asked to stop by ``signum`` (SIGTERM, SIGHUP); its exit status is 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def _raise(signum: int, frame) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
    raise Terminated(signum)


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
    try:
        yield
    finally:
        for s, previous in saved.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(s, previous if previous is not None else signal.SIG_DFL)
