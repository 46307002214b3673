"""Option types and conventions shared by the ``vitplast`` subcommands.

Every value is checked when the command line is parsed (``type=`` validators), so a bad one stops the
command with a one-line error and exit status 2 before any work; ``--help`` shows every default.

Conventions: ``--batch-size`` counts images per forward pass; ``--dtype`` takes one set of choices
(``float32``, ``bfloat16``, ``float16``, or their short forms ``fp32``, ``bf16``, ``fp16``);
``--device`` is ``auto`` (CUDA when available), ``cpu``, ``cuda``, ``cuda:N``.
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
        if "%(default)" in text or not action.option_strings or action.nargs == 0:
            return text
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS:
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


def _int(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def nonnegative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def batch_size(text: str) -> int:
    """Images per forward pass: at least 2 (one pair)."""
    value = _int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"images per batch must be >= 2 (one pair), got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def dtype(text: str) -> str:
    """A dtype name, short forms mapped to torch's (``bf16`` -> ``bfloat16``)."""
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(DTYPES)} (or {', '.join(DTYPE_ALIASES)}), got {text!r}")
    return name


def device(text: str) -> str:
    """``--device``: :func:`vitplast.runtime.device.check_device` as an argparse type."""
    from ..runtime.device import check_device

    try:
        return check_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at column {exc.colno}): {text!r}") \
            from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object {{\"key\": value, ...}}, got {text!r}")
    return value


def component(text: str) -> tuple[str, str]:
    """``LABEL=GLOB``: a component label and a module-name glob (``*`` = the layer index, ``**`` = any
    prefix, ``?`` and ``[...]`` inside a segment)."""
    from vitplast_kernels.measure.presets import check_pattern

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
    if not pairs:
        return None
    out: dict[str, list[str]] = {}
    for label, glob in pairs:
        out.setdefault(label, []).append(glob)
    return {k: v[0] if len(v) == 1 else tuple(v) for k, v in out.items()}


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


def check_seed(value, flag: str = "--seed") -> int:
    """``value`` as a seed: an integer in ``0..MAX_SEED`` (ValueError naming ``flag`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ValueError(f"{flag} must be an integer in 0..{MAX_SEED}, got {value!r}")
    return value


def seed(text: str) -> int:
    """``--seed``: an integer in ``0..MAX_SEED``."""
    value = _int(text)
    try:
        return check_seed(value, "seed")
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in 0..{MAX_SEED}, got {text!r}") from None


def check_steps(value, flag: str = "--steps") -> int:
    """``value`` as a number of optimiser steps: an integer in ``1..MAX_STEPS``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STEPS:
        raise ValueError(f"{flag} must be an integer in 1..{MAX_STEPS}, got {value!r}")
    return value
