"""SIGTERM and SIGHUP stop a command like Ctrl-C, and the same stop delivered twice (a hangup sent to
the process group and forwarded again by a parent such as ``timeout``) still ends in the command's one
line and status 129, not in a silent kill; a second signal a while later ends the process at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from helpers import default_stops

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import vitplast.measure.command as command
    from vitplast.cli import main

    def run(args):
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(10)
        finally:  # the command stopping (workers, files) when the same hangup arrives again
            time.sleep({gap})
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.2)
        return 0

    command.run = run
    sys.exit(main(["measure", "--out", sys.argv[1]]))
""")


def _run(gap: float, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(gap=gap), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, preexec_fn=default_stops)


def test_the_same_hangup_twice_ends_in_the_one_line_and_129(tmp_path):
    done = _run(0.05, tmp_path)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 129 and len(lines) == 1, done.stderr
    assert lines[0].startswith("vitplast measure: stopped by SIGHUP: "), lines


def test_a_second_hangup_a_while_later_ends_the_process_at_once(tmp_path):
    done = _run(1.5, tmp_path)
    assert done.returncode == -signal.SIGHUP and "Traceback" not in done.stderr, done.stderr
