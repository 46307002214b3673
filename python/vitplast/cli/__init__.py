"""The `vitplast` command line.

Each subcommand lives in its own module of this package, which defines
``add_arguments(parser)`` and ``run(args) -> int``; this file only routes.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "measure": ("vitplast.measure.command", "measure the plasticity of every component of a model"),
    "finetune": ("vitplast.finetune.command",
                 "finetune chosen components with per-step plasticity monitoring"),
    "profile": ("vitplast.profile.command", "time and size a plasticity measurement on a large model"),
    "claim": ("vitplast.claim.command", "test whether plasticity predicts which component to finetune"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vitplast", description="Plasticity of vision-transformer components."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # subcommand not shipped in this build
        p = sub.add_parser(name, help=help_text, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
