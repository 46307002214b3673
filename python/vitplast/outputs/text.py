"""Terminal-safe text: what the commands print of a message they did not write (an exception's, a
warning's, a file's) has no escape sequences or control characters and fits on one line."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (line breaks kept)."""
    return _ANSI.sub("", str(text))


def plain_text(text: str) -> str:
    """``text`` without terminal escape sequences or control characters, on one line."""
    text = strip_escapes(text)
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
