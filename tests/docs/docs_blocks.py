"""The fenced blocks of the README and of docs/: what the docs runner (``test_docs.py``) executes.

A page's blocks run in order, in one temporary directory and one Python namespace per page (per named
part of it, ``part:`` below), so a block may use what an earlier one made (a run directory, a
variable). What runs:

- ``python``: the code, executed;
- ``bash``: each command line (``\\`` continues a line; ``#`` starts a comment);
- ``console``: the ``$ `` lines are commands, the lines after each are output that must appear, in
  order (``...`` stands for anything; ``$ echo $?`` prints the previous command's exit status).

Other languages (``text``, ``yaml``, ...) are not run. An HTML comment right before a block tells the
runner more (it is invisible on the rendered page):

    <!-- docs-test
    slow                                  run it only with the slow tests
    skip: REASON                          never run it (the reason is required)
    needs: cuda                           skip it without CUDA (or a module name: lightning, pandas)
    as-is                                 do not append the small settings to its vitplast commands
    small: --steps 2                      flags appended to its vitplast commands, after the defaults
    replace: OLD => NEW                   run the block with OLD replaced (repeatable)
    part: NAME                            run it with the page's other blocks of part NAME only: in
                                          their own directory and namespace, maybe in another worker
    setup:                                Python run first, in the page's namespace (indented lines)
        make_images("imgs")
    -->

Commands that take long on the page's own settings say so in their comment (``# about 5 min on 2
CPU cores``): a ``vitplast finetune``, ``claim`` or ``profile`` line, ``torchrun`` and ``make`` targets
that do work must carry a time, or the runner fails.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = ("python", "bash", "console")
# a time stated in a command's comment: "about 5 min", "~45 s", "3 minutes", "under 2 h"
TIME = re.compile(r"\d+(\.\d+)?\s*(s|sec|seconds?|min|minutes?|h|hours?)\b")
LONG_MAKE = ("demo", "test", "test-fast", "bench", "gpu-check", "docs")
LONG_VITPLAST = ("finetune", "claim", "profile")


@dataclasses.dataclass
class Directive:
    slow: bool = False
    skip: str | None = None
    needs: list[str] = dataclasses.field(default_factory=list)
    as_is: bool = False
    small: list[str] = dataclasses.field(default_factory=list)
    replace: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    setup: str = ""
    part: str = ""  # "" : the page's main part


@dataclasses.dataclass
class Block:
    page: str  # path relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    directive: Directive

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def part(self) -> str:
        """The blocks that share a directory and a namespace: the page, or one named part of it."""
        return f"{self.page}#{self.directive.part}" if self.directive.part else self.page


@dataclasses.dataclass
class Command:
    """One command line of a bash or console block: its words, its comment, and (console) the output
    lines that must appear."""

    text: str
    argv: list[str]
    comment: str
    expected: list[str] = dataclasses.field(default_factory=list)


def parse_directive(text: str) -> Directive:
    d = Directive()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not line:
            continue
        if key == "slow":
            d.slow = True
        elif key == "as-is":
            d.as_is = True
        elif key == "skip":
            if not value:
                raise ValueError("docs-test skip: give the reason")
            d.skip = value
        elif key == "needs":
            d.needs += value.split()
        elif key == "small":
            d.small += shlex.split(value)
        elif key == "replace":
            old, sep, new = value.partition(" => ")
            if not sep:
                raise ValueError(f"docs-test replace: expected 'OLD => NEW', got {value!r}")
            d.replace.append((old, new))
        elif key == "part":
            if not value:
                raise ValueError("docs-test part: give its name")
            d.part = value
        elif key == "setup":
            body = []
            while i < len(lines) and (not lines[i].strip() or lines[i][:1] in " \t"):
                body.append(lines[i])
                i += 1
            d.setup = textwrap.dedent("\n".join(body))
        else:
            raise ValueError(f"docs-test: unknown key {key!r}")
    return d


FENCE = re.compile(r"^(\s*)```\s*([\w-]*)")
DIRECTIVE = re.compile(r"<!--\s*docs-test\b(.*?)-->", re.S)


def page_blocks(path: Path) -> list[Block]:
    """The runnable blocks of one Markdown page, with their directives."""
    text = path.read_text()
    lines = text.splitlines()
    rel = str(path.relative_to(ROOT))
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, language, start = len(m.group(1)), m.group(2).lower(), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        if language not in RUN_LANGUAGES:
            continue
        before = "\n".join(lines[:start]).rstrip()
        found = list(DIRECTIVE.finditer(before))
        directive = Directive()
        if found and before.endswith("-->") and found[-1].end() == len(before):
            directive = parse_directive(found[-1].group(1))
        blocks.append(Block(rel, start + 1, language, "\n".join(body), directive))
    return blocks


def _split_comment(line: str) -> tuple[str, str]:
    """``(command, comment)``: the text before an unquoted ``#`` and the text after it."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip(), line[k + 1:].strip()
    return line.rstrip(), ""


def _joined(lines: list[str]) -> list[tuple[str, str]]:
    """Logical lines: ``\\`` continuations joined, comments split off (a comment on any physical line
    of the command counts, and one on the lines just above it)."""
    out, parts, comments = [], [], []
    for raw in lines:
        text, comment = _split_comment(raw)
        if comment:
            comments.append(comment)
        if text.endswith("\\"):
            parts.append(text[:-1])
            continue
        parts.append(text)
        joined = " ".join(p.strip() for p in parts).strip()
        if joined:
            out.append((joined, " ".join(comments)))
            comments = []
        parts = []  # a comment line alone belongs to the command below it
    return out


def commands(block: Block) -> list[Command]:
    """The commands of a bash or console block."""
    if block.language == "bash":
        return [Command(t, shlex.split(t), c) for t, c in _joined(block.code.splitlines())]
    out: list[Command] = []
    pending: list[str] = []
    for raw in block.code.splitlines():
        if raw.startswith("$ ") or (pending and pending[-1].endswith("\\")):
            pending.append(raw[2:] if raw.startswith("$ ") else raw)
            if not pending[-1].endswith("\\"):
                ((text, comment),) = _joined(pending)
                out.append(Command(text, shlex.split(text), comment))
                pending = []
        elif out and raw.strip():
            out[-1].expected.append(raw.strip())
    return out


def needs_time(cmd: Command) -> bool:
    """Whether ``cmd`` is one whose comment must state how long it takes."""
    words = [w for w in cmd.argv if "=" not in w.split("/")[0]]  # VAR=value prefixes dropped
    if not words:
        return False
    if words[0] == "make":
        return any(t in LONG_MAKE for t in words[1:])
    if words[0] == "torchrun":
        return True
    if words[0] == "vitplast" and len(words) > 1 and words[1] in LONG_VITPLAST:
        return not (words[1] == "claim" and "--dry-run" in words)
    return False


def output_matches(expected: list[str], actual: str) -> str | None:
    """None when every expected line appears in ``actual``, in order (``...`` = anything), else the
    first line that does not."""
    lines = [line.strip() for line in actual.splitlines()]
    at = 0
    for want in expected:
        if want == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")))
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def documentation_pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
