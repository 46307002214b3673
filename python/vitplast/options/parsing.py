"""The argparse side the ``vitplast`` subcommands share; what their options are, and how each value
is checked, is declared in `vitplast.options.fields`.

- `setup_parser`: a subcommand's parser prints every default in ``--help``
  (`HelpFormatter`) and reports bad usage as one line ``prog: error: ...`` with exit status 2;
- `fail`: the same one line for an error found after parsing;
- the text parsers of option kinds, each raising ``argparse.ArgumentTypeError`` with the reason, which
  `vitplast.options.fields.resolve` rewords as ``--flag: reason``: `component`
  (``LABEL=GLOB``), `component_option` (repeated ``--component`` values or a mapping),
  `model_arg` (``KEY=VALUE``), `json_object` (a JSON object);
- the names and short forms of ``--dtype`` (`DTYPES`, `DTYPE_ALIASES`) and the limits of
  ``--seed`` and ``--steps`` (`MAX_SEED`, `MAX_STEPS`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

DTYPES = ("float32", "bfloat16", "float16")
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's layout and appends ``(default: X)`` to every option that has one
    (not to flags, nor to options whose default ``None`` is described in their help)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" in text or not action.option_strings or action.nargs == 0 or action.default is None
                or action.default is False or action.default == argparse.SUPPRESS):
            return text
        return text + " (default: %(default)s)"


def setup_parser(parser: argparse.ArgumentParser, *, defaults_in_help: bool = True) -> None:
    """Defaults in ``--help`` (unless ``defaults_in_help=False``: only where the help text says them),
    and errors as one line (``prog: error: ...``, exit status 2) instead of the usage block followed by
    the error."""
    if defaults_in_help:
        parser.formatter_class = HelpFormatter

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")

    parser.error = error


def fail(prog: str, message: str) -> int:
    """Prints ``prog: error: message`` (one line) to stderr; returns the exit status 2."""
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def json_object(text: str) -> dict:
    """A JSON object (``{"key": value, ...}``) as a dict."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"not valid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object {{\"key\": value, ...}}, got {text!r}")
    return value


def component(text: str) -> tuple[str, str]:
    """``LABEL=GLOB``: a component label and a module-name glob (``*`` = the layer index, ``**`` = any
    prefix, ``?`` and ``[...]`` inside a segment)."""
    from vitplast_kernels.measure.presets import check_pattern  # heavy: torch; options stay torch-free

    label, sep, glob = text.partition("=")
    label, glob = label.strip(), glob.strip()
    if not sep or not label or not glob:
        raise argparse.ArgumentTypeError(f"expected LABEL=GLOB (e.g. MHA='blocks.*.attn'), got {text!r}")
    try:
        check_pattern(glob)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return label, glob


def components(pairs: list[tuple[str, str]] | None) -> dict[str, str | tuple[str, ...]] | None:
    """Repeated ``--component`` values as a capture mapping; a label given several times is a component
    made of several modules (their outputs together, e.g. a SwiGLU's two gates)."""
    out: dict[str, list[str]] = {}
    for label, glob in pairs or ():
        out.setdefault(label, []).append(glob)
    return {k: v[0] if len(v) == 1 else tuple(v) for k, v in out.items()} or None


def component_option(value):
    """An option's ``--component`` values (``LABEL=GLOB`` texts or pairs) or a ``{label: glob}`` mapping
    (globs of a several-module component as a list or tuple) as the capture's mapping, or ``None``."""
    if value is None or isinstance(value, dict):
        if not value:
            return None
        for label, glob in value.items():
            for g in (glob,) if isinstance(glob, str) else glob:
                component(f"{label}={g}")  # the same check as the flag's
        return {str(k): v if isinstance(v, str) else tuple(v) for k, v in value.items()}
    return components([component(v) if isinstance(v, str) else tuple(v) for v in value])


def model_arg(text: str) -> tuple[str, object]:
    """``--model-arg KEY=VALUE``: VALUE parsed as JSON when it is JSON, else kept as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--model-arg expects KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


MAX_SEED = 2**32 - 1  # numpy's seed range, within every generator the commands seed
MAX_STEPS = 10**9  # optimiser steps of one run: beyond it a run would not end (nor its data order seed)
