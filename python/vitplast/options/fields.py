"""One description of a command's options, from which its CLI flags, defaults, validation and error
wording all come.

A command declares its options once, as a dataclass whose fields are made by `option`:

    @dataclasses.dataclass
    class Options:
        steps: int = option(150, "optimiser steps", kind=integer(1))
        lr: list = option("1e-3", "learning rate(s), comma-separated", kind=csv(number(positive=True)))

- `add_options` adds one argparse argument per field (flag ``--steps``, the default shown in
  ``--help``); argparse only collects the text: it converts and checks nothing;
- `resolve` turns the collected values, or the keywords of the command's Python function, into
  the dataclass: text is parsed by the field's kind (``Kind.parse``), every value checked
  (``Kind.check``, which may normalise it), ``None`` means the default; then the dataclass's
  ``validate()`` checks what involves several options;
- every problem is an `OptionError` (a ``ValueError``) worded ``--flag: what is wrong``, which
  the command prints as one line ``vitplast CMD: error: --flag: ...`` with exit status 2
  (`vitplast.options.parsing.fail`), the same from the CLI and from Python.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..runtime.resources import usable_cpus
from .parsing import setup_parser


class OptionError(ValueError):
    """A bad option value: ``--flag: what is wrong`` (one line)."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """How one option's value is read from the command line (``parse``: text -> value) and checked
    from anywhere (``check``: value -> normalised value); both raise ValueError with the reason."""

    parse: Callable[[str], Any] = str
    check: Callable[[Any], Any] = lambda v: v
    metavar: str | None = None


@dataclasses.dataclass(frozen=True)
class Spec:
    """The CLI side of an option (see `option`)."""

    help: str | None = None
    kind: Kind = Kind()
    # where it is: on the command line at all, its flag (and the one storing False), its group in --help
    cli: bool = True
    flag: str | None = None
    negation: str | None = None  # a second flag storing False in the same option (--no-progress)
    group: str | None = None
    # how argparse reads it
    required: bool = False
    action: str | None = None
    nargs: str | None = None
    const: Any = None
    metavar: str | None = None


def option(default: Any = None, help: str | None = None, *, kind: Kind | None = None,
           default_factory: Callable[[], Any] | None = None, **cli: Any) -> Any:
    """A dataclass field describing one option (``cli=False``: a keyword of the Python function only; the
    other keywords: `Spec`'s ``flag``, ``group``, ``metavar``, ``action``, ``nargs``, ``const``,
    ``required``, ``negation``)."""
    meta = {"option": Spec(help, kind or Kind(), **cli)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag_of(field: dataclasses.Field) -> str:
    spec: Spec = field.metadata["option"]
    return spec.flag or "--" + field.name.replace("_", "-")


# ---------------------------------------------------------------------------------------------- kinds
def _text_parser(convert: Callable[[str], Any], expected: str) -> Callable[[str], Any]:
    """``convert`` of a text, its ValueError worded ``expected EXPECTED, got 'TEXT'``."""

    def parse(text: str):
        try:
            return convert(text)
        except ValueError:
            raise ValueError(f"expected {expected}, got {text!r}") from None

    return parse


_int_text = _text_parser(lambda text: int(text.strip(), 10), "an integer")


def integer(minimum: int | None = None, maximum: int | None = None, *, what: str | None = None) -> Kind:
    """An int in ``[minimum, maximum]`` (``what``: the reason given for a value out of range)."""

    def check(v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected an integer, got {v!r}")
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            reason = what or (f"must be an integer in {minimum}..{maximum}" if maximum is not None
                              else "must be a positive integer" if minimum == 1
                              else f"must be an integer >= {minimum}")
            raise ValueError(f"{reason}, got {v!r}")
        return v

    return Kind(_int_text, check)


def thread_count() -> Kind:
    """A count of threads (``--threads``): at least 1, at most the CPUs this process may use, the bound
    of ``--workers`` (more threads than CPUs only wait for each other, and a huge count exhausts
    memory with thread stacks before anything runs)."""

    def check(v):
        v = integer(1).check(v)
        cpus = usable_cpus()
        if v > cpus:
            raise ValueError(f"{v} threads, but this process may use {cpus} CPU(s); use at most {cpus}")
        return v

    return Kind(_int_text, check)


def number(*, positive: bool = False, minimum: float | None = None) -> Kind:
    """A finite float (``positive``: > 0; ``minimum``: >= it)."""

    def check(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"expected a number, got {v!r}")
        if positive and not (v > 0 and math.isfinite(v)):
            raise ValueError(f"must be a positive number, got {v!r}")
        if not math.isfinite(v):
            raise ValueError(f"must be a finite number, got {v!r}")
        if minimum is not None and v < minimum:
            raise ValueError(f"must be >= {minimum:g}, got {v!r}")
        return float(v)

    return Kind(_text_parser(float, "a number"), check)


def choice(values: Sequence[str], aliases: Mapping[str, str] | None = None) -> Kind:
    """One of ``values`` (``aliases``: other spellings mapped to one of them; case-insensitive)."""
    aliases = dict(aliases or {})

    def check(v):
        name = aliases.get(str(v).lower(), str(v).lower()) if isinstance(v, str) else v
        if name not in values:
            more = f" (or {', '.join(aliases)})" if aliases else ""
            raise ValueError(f"must be one of {', '.join(values)}{more}, got {v!r}")
        return name

    return Kind(str, check, "{" + ",".join(values) + "}")


def csv(item: Kind, *, unique: bool = False) -> Kind:
    """Comma-separated values of ``item`` (a list or tuple from Python), as a list."""

    def parse(text: str) -> list:
        parts = [p.strip() for p in text.split(",")]
        if any(not p for p in parts):
            raise ValueError(f"empty value in {text!r}")
        return [item.parse(p) for p in parts]

    def check(v):
        values = list(v) if isinstance(v, (list, tuple)) else [v]
        out = [item.check(item.parse(x) if isinstance(x, str) else x) for x in values]
        if unique and len(set(map(str, out))) != len(out):
            raise ValueError(f"repeated value in {v!r}")
        return out

    return Kind(parse, check)


def checked(fn: Callable[[Any], Any], parse: Callable[[str], Any] = str) -> Kind:
    """A kind whose check is ``fn`` (e.g. `vitplast.runtime.device.check_device`)."""
    return Kind(parse, fn)


def optional(kind: Kind) -> Kind:
    """``kind``, or None (the option's default when it is None)."""
    return Kind(kind.parse, lambda v: None if v is None else kind.check(v), kind.metavar)


# ---------------------------------------------------------------------------------------------- CLI
def add_options(parser: argparse.ArgumentParser, cls: type,
                  groups: Mapping[str, str] | None = None) -> None:
    """One argparse argument per field of ``cls`` (in field order; ``groups``: title of each group)."""
    made: dict[str | None, Any] = {None: parser}
    for f in dataclasses.fields(cls):
        spec: Spec = f.metadata["option"]
        if not spec.cli:
            continue
        if spec.group not in made:
            made[spec.group] = parser.add_argument_group((groups or {}).get(spec.group, spec.group))
        target = made[spec.group]
        default = None if f.default is dataclasses.MISSING or spec.action == "append" else f.default
        # a flag (store_true/false) takes no value: no nargs, const or metavar
        value = {} if spec.action in ("store_true", "store_false") else {
            "nargs": spec.nargs, "const": spec.const, "metavar": spec.metavar or spec.kind.metavar}
        target.add_argument(flag_of(f), dest=f.name, help=spec.help, default=default,
                            action=spec.action or "store", required=spec.required, **value)
        if spec.negation:
            target.add_argument(spec.negation, dest=f.name, action="store_false")


def values_of(args: argparse.Namespace, cls: type) -> dict:
    """The options ``cls`` describes, as collected by `add_options` (text, not yet checked)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.metadata["option"].cli and hasattr(args, f.name):
            value = getattr(args, f.name)
            out[f.name] = None if f.metadata["option"].action == "append" and not value else value
    return out


# ---------------------------------------------------------------------------------------------- checks
def resolve(cls: type, values: Mapping[str, Any]):
    """``cls`` filled from ``values`` (defaults for what is absent or None), every field parsed and
    checked, then ``validate()`` if the class has one; `OptionError` names the option."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(k for k in values if k not in fields)
    if unknown:
        raise OptionError(f"unknown option(s) {unknown}; known: {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        spec: Spec = f.metadata["option"]
        value = values.get(name)
        if value is None:
            value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        try:
            if spec.action == "append" and isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = [spec.kind.parse(v) for v in value]
            elif isinstance(value, str):
                value = spec.kind.parse(value)
            value = spec.kind.check(value)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
            raise OptionError(f"{flag_of(f)}: {' '.join(str(exc).split())}") from None
        kwargs[name] = value
    opts = cls(**kwargs)
    if hasattr(opts, "validate"):
        opts.validate()
    return opts


def fail_on(flag: str, check: Callable[[], Any]):
    """``check()``, its ValueError reworded ``flag: reason`` (an `OptionError`)."""
    try:
        return check()
    except OptionError:
        raise
    except ValueError as exc:
        raise OptionError(f"{flag}: {exc}") from None


def settle(opts: Any, **values: Any) -> None:
    """Sets fields of a frozen options object from inside its ``validate()`` (a default that depends on
    other options, a normalised value); nowhere else."""
    for name, value in values.items():
        object.__setattr__(opts, name, value)


def fields_of(cls: type, source: Any, **overrides: Any) -> dict:
    """The values of ``cls``'s fields read from ``source`` (an options object that composes the same
    groups), with ``overrides``: how one command's typed options become another's, field by field."""
    return {f.name: overrides.get(f.name, getattr(source, f.name)) for f in dataclasses.fields(cls)
            if f.name in overrides or hasattr(source, f.name)}


def options_for(cls: type, opts: Any, keywords: Mapping[str, Any]):
    """A command's checked options: ``keywords`` resolved into ``cls``, over the values of ``opts`` (an
    instance of ``cls``) when given; the library functions take either form."""
    if opts is None:
        return resolve(cls, keywords)
    if not isinstance(opts, cls):
        raise TypeError(f"expected a {cls.__name__}, got {type(opts).__name__}")
    return resolve(type(opts), {**fields_of(type(opts), opts), **keywords})


def subcommand(cls: type, function: Callable[[Any], Any], groups: Mapping[str, str] | None = None, *,
               defaults_in_help: bool = True) -> tuple[Callable, Callable]:
    """A command module's ``add_arguments(parser)`` and ``run(args)`` (what `vitplast.cli` calls): the
    options ``cls`` describes, in ``groups``, parsed, checked and given to ``function`` (the command's
    Python API); status 0 when it returns."""

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        setup_parser(parser, defaults_in_help=defaults_in_help)
        add_options(parser, cls, groups)

    def run(args: argparse.Namespace) -> int:
        function(resolve(cls, values_of(args, cls)))  # what `add_options` collected, checked
        return 0

    return add_arguments, run

