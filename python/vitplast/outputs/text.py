"""Terminal-safe text: what the commands print of a message they did not write (an exception's, a
warning's, a file's) has no escape sequences or control characters and fits on one line; a stream whose
encoding cannot hold a character (``PYTHONIOENCODING=ascii``, ``LC_ALL=C``) gets an ASCII spelling of it
(``+/-`` for ``±``) instead of an error (`encodable_streams`)."""

from __future__ import annotations

import codecs
import contextlib
import re
import sys

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (line breaks kept)."""
    return _ANSI.sub("", str(text))


def plain_text(text: str) -> str:
    """``str(text)`` without terminal escape sequences or control characters, on one line."""
    text = strip_escapes(text)
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


# what a character the output stream cannot encode is written as (else ``?``)
ASCII_FALLBACK = {"±": "+/-", "×": "x", "→": "->", "←": "<-", "≈": "~", "≤": "<=", "≥": ">=", "—": "-",
                  "–": "-", "…": "...", "·": ".", "µ": "u", "²": "^2", "√": "sqrt", "‖": "||", "’": "'",
                  "‘": "'", "“": '"', "”": '"', "Δ": "delta", "σ": "sigma", "ρ": "rho", "τ": "tau",
                  "✓": "ok", "✗": "x"}
ERRORS = "vitplast-ascii"  # the codec error handler writing ASCII_FALLBACK


def ascii_text(text: str) -> str:
    """``text`` with every non-ASCII character replaced by its `ASCII_FALLBACK` (else ``?``)."""
    return "".join(ch if ord(ch) < 128 else ASCII_FALLBACK.get(ch, "?") for ch in str(text))


def _fallback(exc: UnicodeError):
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return ascii_text(exc.object[exc.start:exc.end]), exc.end


codecs.register_error(ERRORS, _fallback)


def encodable_streams(*streams) -> None:
    """Makes each text stream (default: stdout and stderr) write what its encoding cannot hold as ASCII
    (``±`` as ``+/-``) instead of failing; a stream that cannot be reconfigured is left as it is."""
    for stream in streams or (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None or getattr(stream, "errors", None) == ERRORS:
            continue
        with contextlib.suppress(AttributeError, ValueError, OSError, LookupError):
            reconfigure(errors=ERRORS)
