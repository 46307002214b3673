"""Reading a JSON file so that a failure names it: ``read_json_file(path)`` and, for text already read,
``loads_named(text, path)``. A file that is not valid JSON (truncated, edited by hand, not text) raises
`JSONFileError` worded ``FILE: not valid JSON (WHAT: line L, column C)``. It is a `ResultFileError`
(the error of every result file that cannot be believed, `vitplast.outputs.result_files`) and a
``json.JSONDecodeError`` (both ``ValueError``s): callers that caught json's own error keep catching it.
A file that cannot be opened raises the ``OSError`` ``open`` raises (it names the file already).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class ResultFileError(ValueError):
    """A result file that cannot be believed: ``path``, the ``field`` at fault (``""``: the whole file)
    and the ``reason``."""

    def __init__(self, path: str | os.PathLike, field: str, reason: str) -> None:
        self.path, self.field, self.reason = str(path), field, reason
        super().__init__(f"{self.path}: {field + ': ' if field else ''}{reason}")


class JSONFileError(ResultFileError, json.JSONDecodeError):
    """A file that is not valid JSON: ``path`` and ``reason`` (what is wrong, and where); ``field`` is
    ``""`` (the whole file)."""

    def __init__(self, path: str | os.PathLike, reason: str, error: json.JSONDecodeError | None = None):
        self.path, self.field, self.reason = str(path), "", reason  # as ResultFileError sets them
        ValueError.__init__(self, f"{self.path}: {reason}")
        # json's own fields, for callers that read them (the document is not kept: it may be large)
        self.doc, self.msg, self.pos, self.lineno, self.colno = "", reason, 0, 1, 1
        if error is not None:
            self.msg, self.pos, self.lineno, self.colno = error.msg, error.pos, error.lineno, error.colno

    def __str__(self) -> str:
        return ValueError.__str__(self)

    def __reduce__(self):  # pickled as its path and reason (it crosses process pools)
        return JSONFileError, (self.path, self.reason)


def loads_named(text: str | bytes, path: str | os.PathLike) -> Any:
    """``json.loads(text)``, a failure raised as `JSONFileError` naming ``path`` (where ``text`` came
    from)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JSONFileError(path, f"not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno})",
                            exc) from None
    except UnicodeDecodeError as exc:  # bytes that are not UTF-8
        raise JSONFileError(path, f"not valid JSON (not UTF-8 text: {exc.reason} at byte {exc.start})"
                            ) from None


def read_json_file(path: str | os.PathLike) -> Any:
    """The JSON value of the file at ``path`` (UTF-8); `JSONFileError` naming the file when it is not
    valid JSON, the ``OSError`` of ``open`` when it cannot be read."""
    return loads_named(Path(path).read_bytes(), path)
