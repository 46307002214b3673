"""How a ``vitplast`` command ends: its exit status, which exception ends in which, and the one line it
then prints on stderr; warnings are printed one line each as well."""

from __future__ import annotations

import argparse
import contextlib
import errno
import sys

from ..options.parsing import fail
from ..outputs.text import ascii_text, plain_text
from ..runtime.environment import traceback_wanted
from ..runtime.stops import Terminated

EXIT_OK = 0  # done
EXIT_FAILURE = 1  # a failure while working: out of memory, a disk error (a full disk too), a bug
EXIT_USAGE = 2  # bad usage or input: an unknown flag, a bad value, a missing file or package
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM; SIGHUP: 129)

# what bad usage or input raises (OptionError, a bad checkpoint, a bad --out are ValueErrors)
# IsADirectoryError / NotADirectoryError: a path given (or under --out) that is a folder where a file goes,
# or a file where a folder goes: the user's layout, not a failure while working
USAGE_ERRORS = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, ImportError,
                argparse.ArgumentError, argparse.ArgumentTypeError)
# what makes a command need less memory: its own options only (out of memory names them)
SMALLER = {"measure": "--batch-size (or a smaller model or --img-size)",
           "finetune": "--batch-size (or more --grad-accum, a smaller model or --img-size)",
           "claim": "--batch-size or --pair-batch (or a smaller model or --img-size)",
           "profile": "--batch-size (or a smaller model, --img-size or --dtype)"}

EXIT_STATUS_HELP = f"""\
exit status:
  {EXIT_OK:<4} done
  {EXIT_FAILURE:<4} a failure while working: out of memory, a disk error (a full disk too), a bug
       (VITPLAST_TRACEBACK=1 shows where)
  {EXIT_USAGE:<4} bad usage or input: an unknown flag, a bad value, a missing file or package
  {EXIT_INTERRUPTED:<4} interrupted (Ctrl-C): the message says what was kept and how to continue
  {EXIT_TERMINATED:<4} stopped by SIGTERM (129: SIGHUP), likewise"""

# what an interrupted command leaves behind, and how to continue ({out}: its --out)
INTERRUPTED = {
    "finetune": "{out} keeps each run's last checkpoint (every --checkpoint-every steps) and its metrics up "
                "to it; continue with the same command plus --resume",
    "claim": "{out} keeps the finished runs and each unfinished run's last checkpoint; run the same command "
             "again to continue where it stopped",
    "measure": "nothing was written (the output set is written at the end); run the command again",
    "profile": "nothing was written (the output set is written at the end); run the command again",
}


def exit_status(prog: str, command: str | None, exc: BaseException, out: str | None = None) -> int:
    """Prints the one line that ``exc``, raised by ``vitplast COMMAND`` (``prog``), ends the command
    with, and returns its exit status; with ``VITPLAST_TRACEBACK`` on (``1``, ``true``, ``yes``), a
    failure is raised again instead (call it from the ``except`` block). A stop by SIGTERM or SIGHUP
    (`vitplast.runtime.stops.Terminated`) ends like Ctrl-C, with status 128 + the signal."""
    if isinstance(exc, KeyboardInterrupt):
        kept = INTERRUPTED.get(command or "", "").format(out=out or "--out")
        how = f"stopped by {exc.name}" if isinstance(exc, Terminated) else "interrupted"
        _say(f"{prog}: {how}{': ' + kept if kept else ''}")
        return exc.exit_status if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    if isinstance(exc, USAGE_ERRORS):
        if isinstance(exc, OSError) and exc.filename and exc.strerror:  # the path first, no [Errno N]
            exc = f"{exc.filename}: {exc.strerror}"
        fail(prog, plain_text(exc) or type(exc).__name__)  # the whole message, on one line
        return EXIT_USAGE
    if traceback_wanted():
        raise exc
    _say(f"{prog}: error: {_failure(exc, command)}")
    return EXIT_FAILURE


def _failure(exc: BaseException, command: str | None = None) -> str:
    # the first non-empty line of exc's message, without terminal escapes, at most 300 characters
    text = plain_text(next((ln for ln in str(exc).splitlines() if ln.strip()), ""))[:300]
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or any(
            s in text for s in ("can't allocate memory", "out of memory", "Out of memory")):
        return (f"out of memory ({text or type(exc).__name__}); try a smaller "
                f"{SMALLER.get(command or '', '--batch-size')}")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return f"disk full ({text}); free some space or write elsewhere (--out)"
    return f"{type(exc).__name__}{': ' + text if text else ''} (set VITPLAST_TRACEBACK=1 to see where)"


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr closed: the exit status still tells
        try:
            print(line, file=sys.stderr)
        except UnicodeEncodeError:  # an encoding without the character: its ASCII spelling
            print(ascii_text(line), file=sys.stderr)


def warning_printer(prog: str):
    """A ``warnings.showwarning`` printing ``prog: warning: message``, one line, no source line; the same
    words once (a data folder read for the pairs and again for the criteria warns once)."""
    said: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = f"{prog}: warning: {plain_text(message)}\n"
        if text in said:
            return
        said.add(text)
        with contextlib.suppress(OSError, ValueError):  # stderr closed: warnings are not worth failing for
            (file or sys.stderr).write(text)

    return show
