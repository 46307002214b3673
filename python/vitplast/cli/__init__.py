"""The `vitplast` command line.

Each subcommand lives in its own module of this package, which defines
``add_arguments(parser)`` and ``run(args) -> int``; this file only routes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

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


# what an interrupted command leaves behind, and how to continue ({out}: its --out)
INTERRUPTED = {
    "finetune": "{out} keeps each run's last checkpoint (every --checkpoint-every steps) and its metrics up "
                "to it; continue with the same command plus --resume",
    "claim": "{out} keeps the finished runs and each unfinished run's last checkpoint; run the same command "
             "again to continue where it stopped",
    "measure": "nothing was written (the output set is written at the end); run the command again",
    "profile": "nothing was written (the output set is written at the end); run the command again",
}
EXIT_ERROR, EXIT_INTERRUPTED = 1, 130  # a failure while working; Ctrl-C (128 + SIGINT)


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand. Whatever happens it ends in one line on stderr and a conventional exit status:
    0 done, 2 bad input (the subcommand's own message), 1 a failure while working (out of memory, a
    disk error, a bug: ``VITPLAST_TRACEBACK=1`` shows where), 130 Ctrl-C (what was kept, how to go on).
    Warnings are printed as ``vitplast COMMAND: warning: ...``, one line each."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    prog = f"vitplast {args.command}"
    with warnings.catch_warnings():
        warnings.showwarning = _warning_printer(prog)
        try:
            return int(args._run(args) or 0)
        except KeyboardInterrupt:
            kept = INTERRUPTED.get(args.command, "").format(out=getattr(args, "out", None) or "--out")
            print(f"{prog}: interrupted{': ' + kept if kept else ''}", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception as exc:
            if os.environ.get("VITPLAST_TRACEBACK"):
                raise
            print(f"{prog}: error: {_failure(exc)}", file=sys.stderr)
            return EXIT_ERROR


def _failure(exc: BaseException) -> str:
    from ..models.checkpoints import plain_text

    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    text = plain_text(lines[0] if lines else "")[:300]
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or any(
            s in text for s in ("can't allocate memory", "out of memory", "Out of memory")):
        return (f"out of memory ({text or type(exc).__name__}); try a smaller --batch-size (or a smaller "
                "model, --img-size or --dtype)")
    return (f"{type(exc).__name__}: {text} (set VITPLAST_TRACEBACK=1 to see where)" if text else
            f"{type(exc).__name__} (set VITPLAST_TRACEBACK=1 to see where)")


def _warning_printer(prog: str):
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        from ..models.checkpoints import plain_text

        stream = file or sys.stderr
        try:
            stream.write(f"{prog}: warning: {plain_text(message)}\n")
        except (OSError, ValueError):  # stderr closed: warnings are not worth failing for
            pass

    return show


if __name__ == "__main__":
    sys.exit(main())
