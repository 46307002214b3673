"""The options of ``vitplast compare``: `CompareOptions` (flags, defaults, checks and wording:
`vitplast.options.fields`). The command reads saved results only, so it takes none of the model,
data, optimisation or runtime groups of `vitplast.options.groups`."""

from __future__ import annotations

import dataclasses
import os

from ..options.fields import Kind, OptionError, checked, csv, option, optional


def _paths(value) -> list[str]:
    values = [value] if isinstance(value, (str, os.PathLike)) else list(value or [])
    if not all(isinstance(v, (str, os.PathLike)) for v in values):
        raise ValueError(f"expected paths, got {value!r}")
    return [os.fspath(v) for v in values]


def _name(value) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("empty name")
    return text


@dataclasses.dataclass(frozen=True)
class CompareOptions:
    """Every option of ``vitplast compare`` (a keyword of `vitplast.compare.compare` each)."""

    runs: list = option(
        None, "two or more measurements: plasticity.json files, or directories holding one (what "
        "vitplast measure --out and the trainer callbacks write)", cli=False, kind=Kind(str, _paths))
    labels: list | None = option(
        None, "a name per run, comma-separated, in the order of the runs (default: each directory's name)",
        metavar="A,B,...", kind=optional(csv(checked(_name), unique=True)))
    components: list | None = option(
        None, "the components to compare, comma-separated (default: every component a run measured)",
        metavar="C,...", kind=optional(csv(checked(_name), unique=True)))
    out: str | None = option(
        None, "write compare.txt, compare.csv, compare.json and compare.png here, as one set (a new "
        "directory, or one a previous compare wrote)", metavar="DIR")

    def validate(self) -> None:
        if len(self.runs) < 2:
            raise OptionError(f"RUN: give at least two measurements to compare, got {len(self.runs)}")
        if self.labels is not None and len(self.labels) != len(self.runs):
            raise OptionError(f"--labels: {len(self.labels)} name(s) for {len(self.runs)} runs")
