"""No backslash line continuations in the project's Python (PEP 8: wrap in parentheses instead). A
backslash at the end of a line inside a string (a shell example in a help text) is text, not one."""

from __future__ import annotations

import io
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def continuations(source: str) -> list[int]:
    """Line numbers that end in a backslash outside strings and comments."""
    text_kinds = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    in_text: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in text_kinds:
            in_text.update(range(tok.start[0], tok.end[0]))
    return [i for i, line in enumerate(source.splitlines(), 1)
            if line.rstrip().endswith("\\") and i not in in_text]


def test_no_backslash_continuations():
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    found = [f"{name}:{line}" for name in listed if (ROOT / name).is_file()
             for line in continuations((ROOT / name).read_text())]
    assert not found, f"wrap these in parentheses instead of a backslash: {found}"


def test_the_check_finds_a_planted_continuation():
    assert continuations("x = 1 + \\\n    2\n") == [1]
    assert continuations('HELP = """a \\\\\n b"""\n') == []
    assert continuations("x = (1 +\n     2)\n") == []
