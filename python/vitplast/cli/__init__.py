"""The `vitplast` command line.

Each subcommand is a module (``SUBCOMMANDS``) defining ``add_arguments(parser)`` and ``run(args)``, and
optionally ``HELP``, the text its ``--help`` shows above the options (else its docstring). This package
parses and routes; `main` is the one place where an exception becomes an exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from ..options.parsing import setup_parser
from ..outputs.text import encodable_streams
from ..runs.provenance import version_text
from ..runtime.environment import check_environment
from ..runtime.resources import check_workers
from ..runtime.stops import stops_as_exceptions
from .errors import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STATUS_HELP,
    EXIT_TERMINATED,
    EXIT_USAGE,
    exit_status,
    warning_printer,
)

__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_TERMINATED", "EXIT_USAGE", "SUBCOMMANDS",
           "build_parser", "main"]

# subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "measure": ("vitplast.measure.command", "measure the plasticity of every component of a model"),
    "finetune": ("vitplast.finetune.command",
                 "finetune chosen components with per-step plasticity monitoring"),
    "profile": ("vitplast.profile.command", "time and size a plasticity measurement on a large model"),
    "claim": ("vitplast.claim.command", "test whether plasticity predicts which component to finetune"),
    "compare": ("vitplast.compare.command", "compare the plasticity of two or more measurements"),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``vitplast`` parser: one subparser per shipped subcommand, each reporting bad usage as one
    line naming itself (``vitplast COMMAND: error: ...``, exit status 2)."""
    parser = argparse.ArgumentParser(
        prog="vitplast", description="Plasticity of vision-transformer components.", epilog=EXIT_STATUS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    setup_parser(parser, defaults_in_help=False)
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print the versions of vitplast, python, torch, timm and transformers")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, one_line) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # subcommand not shipped in this build
        # what `vitplast COMMAND --help` shows above the options: the module's HELP when it is a string,
        # else its docstring
        text = getattr(module, "HELP", None)
        p = sub.add_parser(name, help=one_line, description=text if isinstance(text, str) else module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        setup_parser(p, defaults_in_help=False)  # the module's add_arguments may set it up again
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs ``vitplast ARGV`` and returns its exit status; whatever happens it ends in one line on stderr
    (``vitplast COMMAND: error: ...``), never a traceback:

    - ``EXIT_OK`` (0): done (``--help`` and ``--version`` too);
    - ``EXIT_FAILURE`` (1): a failure while working, any exception other than those below: out of memory, a
      disk error (a full disk, ``OSError`` ENOSPC, included), a bug; ``VITPLAST_TRACEBACK=1`` raises it
      instead, to show where;
    - ``EXIT_USAGE`` (2): bad usage or input: an unknown flag (reported by that subcommand's parser), a bad
      value, ``ValueError`` (``OptionError`` included), ``FileNotFoundError``, ``ImportError``, a bad
      environment variable;
    - ``EXIT_INTERRUPTED`` (130): Ctrl-C (``KeyboardInterrupt``): the line says what was kept and how to
      continue; ``EXIT_TERMINATED`` (143) likewise for SIGTERM (129 for SIGHUP), which stop the command the
      way Ctrl-C does (worker processes stopped, nothing left running).

    Before anything starts, every command checks the environment variables it reads
    (`vitplast.runtime.environment.check_environment`) and ``--workers`` against the CPUs this process may
    use: a bad value is status 2, one line naming the variable or the flag.

    What the parser itself rejects, ``--help`` and ``--version`` end in ``SystemExit`` with that status, as
    argparse ends them; without a command the help is printed and the status is 2. A subcommand's
    ``run(args)`` may return a status (0, or 2 after printing its own error line) or raise. Warnings, those of
    parsing included (deprecated flags), are printed as ``vitplast COMMAND: warning: ...``, one line each."""
    argv = sys.argv[1:] if argv is None else list(argv)
    encodable_streams()  # a character the terminal cannot encode is printed in ASCII, never an error
    # the subcommand argv names: its first word that is not a flag (vitplast itself takes no option with a
    # value), when it is a subcommand
    command = next((a for a in argv if not a.startswith("-")), None)
    prog = f"vitplast {command}" if command in SUBCOMMANDS else "vitplast"
    with warnings.catch_warnings():
        warnings.showwarning = warning_printer(prog)
        try:
            parser = build_parser()
            args, unknown = parser.parse_known_args(argv)
        except KeyboardInterrupt as exc:
            return exit_status(prog, None, exc)
        sub = getattr(args, "_parser", None)
        if unknown:
            (sub or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
        if sub is None:
            parser.print_help()
            return EXIT_USAGE
        with stops_as_exceptions():  # the line is said inside: the same stop sent twice stays ignored
            try:
                check_environment()
                check_workers(getattr(args, "workers", None))
                return int(args._run(args) or EXIT_OK)
            except (Exception, KeyboardInterrupt) as exc:
                return exit_status(prog, args.command, exc, getattr(args, "out", None))


if __name__ == "__main__":
    sys.exit(main())
