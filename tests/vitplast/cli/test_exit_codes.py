"""Every `vitplast` command ends alike: the same bad input gives the same exit status and one
line on stderr naming the command; 0 done, 1 a failure while working (a full disk included), 2 bad usage
or input, 130 Ctrl-C. Run in this process through `vitplast.cli.main`; where a case needs no real
work, only the ``run`` that main dispatches to is replaced."""

from __future__ import annotations

import argparse
import errno
import importlib
import warnings

import pytest
from vitplast import cli
from vitplast.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, SUBCOMMANDS, main
from vitplast.runs.provenance import version_text, versions

COMMANDS = ("measure", "finetune", "claim", "profile")


def _module(command: str):
    return importlib.import_module(SUBCOMMANDS[command][0])


def _cli(argv: list[str], capsys, *, quiet: bool = True) -> tuple[int, str, list[str]]:
    """Exit status, stdout and the non-empty stderr lines of ``vitplast ARGV`` (``quiet``: warnings
    ignored)."""
    try:
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore")
            rc = main(argv)
    except SystemExit as exc:  # what the parser ends: --help, --version, bad usage
        rc = exc.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return rc, captured.out, [ln for ln in captured.err.splitlines() if ln.strip()]


def _error_line(lines: list[str], command: str) -> str:
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"vitplast {command}: error: "), lines[0]
    assert "\x1b" not in lines[0], repr(lines[0])
    return lines[0]


def _dispatch(monkeypatch, command: str, run) -> None:
    """``run`` in place of the command's own (main looks it up when it builds the parser)."""
    monkeypatch.setattr(_module(command), "run", run)


def _raises(exc: BaseException):
    def run(args):
        raise exc

    return run


def _must_not_run(args):
    raise AssertionError("the command must not run: the parser rejects the input")


def test_exit_statuses_are_the_conventional_ones():
    assert (EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED) == (0, 1, 2, 130)
    for code in ("0", "1", "2", "130"):
        assert f"  {code} " in cli.errors.EXIT_STATUS_HELP
    for name in ("EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_INTERRUPTED"):
        assert name in main.__doc__


# ------------------------------------------------------------------------------------------ bad usage
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("extra", [["--bogus"], ["--bogus=3"], ["stray"]])
def test_unknown_argument_is_reported_by_that_command(command, extra, tmp_path, capsys, monkeypatch):
    _dispatch(monkeypatch, command, _must_not_run)
    rc, out, lines = _cli([command, "--out", str(tmp_path / "o"), *extra], capsys)
    assert rc == EXIT_USAGE and out == ""
    assert _error_line(lines, command) == (f"vitplast {command}: error: unrecognized arguments: "
                                           f"{' '.join(extra)} (see vitplast {command} --help)")
    assert not (tmp_path / "o").exists()


def test_unknown_argument_without_a_command(capsys):
    rc, _, lines = _cli(["--bogus"], capsys)
    assert rc == EXIT_USAGE
    assert lines == ["vitplast: error: unrecognized arguments: --bogus (see vitplast --help)"]
    rc, _, lines = _cli(["bogus"], capsys)
    assert rc == EXIT_USAGE and len(lines) == 1 and lines[0].startswith("vitplast: error: ")
    assert "invalid choice: 'bogus'" in lines[0]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("flag,value", [("--device", "bogus"), ("--batch-size", "0")])
def test_bad_value_of_a_shared_flag(command, flag, value, tmp_path, capsys):
    out = tmp_path / "o"
    rc, _, lines = _cli([command, flag, value, "--out", str(out)], capsys)
    assert rc == EXIT_USAGE
    assert _error_line(lines, command).startswith(f"vitplast {command}: error: {flag}: ")
    assert not out.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_out_that_is_a_regular_file(command, tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("mine")
    rc, _, lines = _cli([command, "--out", str(afile)], capsys)
    assert rc == EXIT_USAGE and "--out" in _error_line(lines, command)
    assert afile.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_run_returning_2_and_one_raising_end_alike(command, tmp_path, capsys, monkeypatch):
    from vitplast.options.fields import OptionError
    from vitplast.options.parsing import fail

    argv = [command, "--out", str(tmp_path / "o")]
    _dispatch(monkeypatch, command, lambda args: fail(f"vitplast {command}", "--x: must be\n  positive"))
    returned = _cli(argv, capsys)
    _dispatch(monkeypatch, command, _raises(OptionError("--x: must be\n  positive")))
    raised = _cli(argv, capsys)
    assert returned == raised
    assert raised[0] == EXIT_USAGE
    assert _error_line(raised[2], command).endswith("error: --x: must be positive")


@pytest.mark.parametrize("exc", [ValueError("bad --data"), FileNotFoundError(errno.ENOENT, "No such file",
                                 "w.pth"), ImportError("pip install timm"), argparse.ArgumentTypeError("x")])
def test_bad_input_raised_by_a_run_exits_2(exc, tmp_path, capsys, monkeypatch):
    _dispatch(monkeypatch, "finetune", _raises(exc))
    rc, _, lines = _cli(["finetune", "--out", str(tmp_path / "o")], capsys)
    said = str(exc) if not isinstance(exc, OSError) else f"{exc.filename}: {exc.strerror}"  # path first
    assert rc == EXIT_USAGE and said in _error_line(lines, "finetune")


# ------------------------------------------------------------------------------------------ failures
@pytest.mark.parametrize("command", COMMANDS)
def test_full_disk_is_a_failure_exit_1(command, tmp_path, capsys, monkeypatch):
    _dispatch(monkeypatch, command, _raises(OSError(errno.ENOSPC, "No space left on device")))
    rc, _, lines = _cli([command, "--out", str(tmp_path / "o")], capsys)
    line = _error_line(lines, command)
    assert rc == EXIT_FAILURE and "disk full" in line and "No space left on device" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_other_exceptions_are_failures_exit_1(command, tmp_path, capsys, monkeypatch):
    _dispatch(monkeypatch, command, _raises(RuntimeError("kernel launch failed\nsecond line")))
    rc, _, lines = _cli([command, "--out", str(tmp_path / "o")], capsys)
    line = _error_line(lines, command)
    assert rc == EXIT_FAILURE and "RuntimeError: kernel launch failed" in line
    assert "VITPLAST_TRACEBACK" in line
    assert "second line" not in line


def test_traceback_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_TRACEBACK", "1")
    _dispatch(monkeypatch, "measure", _raises(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError, match="No space"):
        main(["measure", "--out", str(tmp_path / "o")])


def test_out_of_memory_is_a_failure_exit_1_with_advice(tmp_path, capsys, monkeypatch):
    import torch

    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore details")
    _dispatch(monkeypatch, "profile", _raises(oom))
    rc, _, lines = _cli(["profile", "--out", str(tmp_path / "o")], capsys)
    line = _error_line(lines, "profile")
    assert rc == EXIT_FAILURE and "out of memory" in line and "--batch-size" in line
    assert "more details" not in line


@pytest.mark.parametrize("command", ["measure", "finetune", "claim", "profile"])
def test_out_of_memory_advice_names_only_the_commands_own_options(command, tmp_path, capsys, monkeypatch):
    """measure has no --dtype (it was advised anyway); every flag named is one the command takes."""
    import re

    from vitplast.cli import build_parser

    _dispatch(monkeypatch, command, _raises(MemoryError()))
    rc, _, lines = _cli([command, "--out", str(tmp_path / "o")], capsys)
    line = _error_line(lines, command)
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    flags = {f for a in sub._actions for f in a.option_strings}
    named = set(re.findall(r"--[a-z-]+", line))
    assert rc == EXIT_FAILURE and "--batch-size" in named and named <= flags, (line, named - flags)


def test_a_directory_where_an_output_file_goes_is_usage_exit_2(tmp_path, capsys, monkeypatch):
    """A folder standing where claim.json (or any output file) is written: one line naming it, status 2
    (before: status 1, naming a temporary file)."""
    from vitplast_kernels.atomic_io import atomic_write_bytes

    (tmp_path / "claim.json").mkdir()
    _dispatch(monkeypatch, "claim", lambda args: atomic_write_bytes(tmp_path / "claim.json", b"{}"))
    rc, _, lines = _cli(["claim", "--out", str(tmp_path)], capsys)
    line = _error_line(lines, "claim")
    said = f"error: {tmp_path / 'claim.json'}: a directory is where this file is written; move it away"
    assert rc == 2 and line.endswith(said), line


def test_the_same_warning_is_printed_once(tmp_path, capsys, monkeypatch):
    import warnings

    def twice(args):  # a data folder read for the pairs, then for the criteria: two places, same words
        warnings.warn("/data: did not follow 1 link(s)", stacklevel=1)
        warnings.warn("/data: did not follow 1 link(s)", stacklevel=1)

    _dispatch(monkeypatch, "measure", twice)
    rc, _, lines = _cli(["measure", "--out", str(tmp_path / "o")], capsys, quiet=False)
    assert rc == 0 and sum("did not follow" in ln for ln in lines) == 1, lines


@pytest.mark.parametrize("exc", [ValueError("\x1b[31m--data\x1b[0m: bad\tvalue\x07"),
                                 RuntimeError("\x1b[1mboom\x1b[0m")])
def test_error_lines_are_plain_text(exc, tmp_path, capsys, monkeypatch):
    _dispatch(monkeypatch, "measure", _raises(exc))
    rc, _, lines = _cli(["measure", "--out", str(tmp_path / "o")], capsys)
    line = _error_line(lines, "measure")  # no escape sequence
    assert rc in (EXIT_USAGE, EXIT_FAILURE) and all(ch.isprintable() for ch in line), repr(line)


KEPT = {"finetune": "--resume", "claim": "run the same command again", "measure": "nothing was written",
        "profile": "nothing was written"}


@pytest.mark.parametrize("command,kept", sorted(KEPT.items()))
def test_ctrl_c_exit_130_says_what_was_kept(command, kept, tmp_path, capsys, monkeypatch):
    _dispatch(monkeypatch, command, _raises(KeyboardInterrupt()))
    out = tmp_path / "o"
    rc, _, lines = _cli([command, "--out", str(out)], capsys)
    assert rc == EXIT_INTERRUPTED and len(lines) == 1
    assert lines[0].startswith(f"vitplast {command}: interrupted: ") and kept in lines[0], lines
    if command == "finetune":
        assert str(out) in lines[0]


# ------------------------------------------------------------------------------------------ help, version
@pytest.mark.parametrize("command", COMMANDS)
def test_help_exits_0(command, capsys, monkeypatch):
    _dispatch(monkeypatch, command, _must_not_run)
    rc, out, lines = _cli([command, "--help"], capsys)
    assert rc == EXIT_OK and out.startswith(f"usage: vitplast {command} ") and lines == []


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_the_help_attribute_over_the_docstring(command, capsys, monkeypatch):
    module = _module(command)
    monkeypatch.setattr(module, "HELP", "What this command does, for its users.", raising=False)
    rc, out, _ = _cli([command, "--help"], capsys)
    assert rc == EXIT_OK and "What this command does, for its users." in out
    doc = (module.__doc__ or "").strip()
    if doc:
        assert doc.splitlines()[0] not in out
    monkeypatch.delattr(module, "HELP")
    rc, out, _ = _cli([command, "--help"], capsys)
    assert rc == EXIT_OK and (not doc or " ".join(doc.split()[:6]) in " ".join(out.split()))


def test_top_level_help_and_version(capsys):
    rc, out, lines = _cli(["--help"], capsys)
    assert rc == EXIT_OK and lines == [] and "exit status:" in out
    for command in COMMANDS:
        assert command in out
    rc, out, lines = _cli(["--version"], capsys)
    assert rc == EXIT_OK and lines == []
    assert out.startswith(f"vitplast {versions()['vitplast-kernels']} (python ")
    assert all(f"{lib} " in out for lib in ("torch", "timm", "transformers"))
    assert out.split()[1] != ""


def test_version_without_package_metadata(monkeypatch):
    import importlib.metadata as metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert version_text().startswith("vitplast unknown (python ")


# ------------------------------------------------------------------------------------------ warnings
class _Deprecated(argparse.Action):
    """A flag that warns while the command line is parsed, as a deprecated alias does."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        warnings.warn(f"{option_string} is deprecated\nuse --new", FutureWarning, stacklevel=2)


@pytest.mark.parametrize("command", COMMANDS)
def test_warnings_of_parsing_and_of_the_run_are_one_line_each(command, tmp_path, capsys, monkeypatch):
    module = _module(command)
    add = module.add_arguments

    def add_arguments(parser):
        add(parser)
        parser.add_argument("--old", dest="_old_flag", action=_Deprecated, help=argparse.SUPPRESS)

    def run(args):
        warnings.warn("while working", UserWarning, stacklevel=2)
        return 0

    monkeypatch.setattr(module, "add_arguments", add_arguments)
    _dispatch(monkeypatch, command, run)
    rc, _, lines = _cli([command, "--old", "--out", str(tmp_path / "o")], capsys, quiet=False)
    assert rc == EXIT_OK
    assert lines == [f"vitplast {command}: warning: --old is deprecated use --new",
                     f"vitplast {command}: warning: while working"]
