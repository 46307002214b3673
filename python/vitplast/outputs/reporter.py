"""Where a command's messages and progress bars go: a `Reporter` object passed down explicitly.

``Reporter()`` prints each message on stdout (in ASCII, ``+/-`` for ``±``, where its encoding cannot
hold a character; nowhere once stdout is a closed pipe); ``Reporter(say=lines.append)`` collects them
(tests, a notebook); ``Reporter.silent()`` drops them (worker processes, ranks other than 0). Progress
bars are tqdm bars, shown when the reporter's ``progress`` setting says so (None: when stderr is a terminal).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

from .text import ascii_text


def _print(text: str) -> None:
    """Prints ``text`` on stdout; what stdout's encoding cannot hold is written in ASCII (``+/-``), and
    a stdout that is gone (a closed pipe) drops it: printing never costs a command its results."""
    try:
        try:
            print(text, flush=True)
        except UnicodeEncodeError:
            print(ascii_text(text), flush=True)
    except BrokenPipeError:
        # after a closed pipe: later prints, and the flush at exit, go nowhere instead of failing
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
    except (OSError, ValueError):  # stdout closed
        pass


class Reporter:
    def __init__(self, say: Callable[[str], None] | None = None, *, progress: bool | None = None) -> None:
        self._say = say if say is not None else _print
        self.progress = progress

    @classmethod
    def silent(cls) -> Reporter:
        return cls(lambda text: None, progress=False)

    def say(self, text: str) -> None:
        """One message (one or more lines) for the user."""
        self._say(text)

    def shows_progress(self, wanted: bool | None = None) -> bool:
        """Whether bars are drawn: ``wanted`` (a command's ``--progress``/``--no-progress``) unless this
        reporter is silent, else when stderr is a terminal."""
        if self.progress is False:
            return False
        choice = wanted if wanted is not None else self.progress
        return choice if choice is not None else sys.stderr.isatty()

    def bar(self, *, total: int, desc: str, unit: str = "it", initial: int = 0, wanted: bool | None = None,
            leave: bool = False):
        """A tqdm bar (disabled when `shows_progress` says no)."""
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, leave=leave,
                    disable=not self.shows_progress(wanted))
