"""Two runs of every criterion in two fresh processes give bitwise the same scores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
from criteria_helpers import tiny_setting
from vitplast.criteria import CRITERIA, get_criterion
setting = tiny_setting()
out = {{n: [v.hex() for v in get_criterion(n).score(setting).values.ravel().tolist()] for n in CRITERIA}}
print(json.dumps(out))
"""


def _start() -> subprocess.Popen:
    code = SCRIPT.format(here=str(Path(__file__).parent))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_criterion_is_bitwise_deterministic_across_processes():
    procs = [_start(), _start()]  # two fresh processes at once
    first, second = (_result(p) for p in procs)
    assert set(first) == {"plasticity", "rgn", "fisher", "cka", "spectral", "size"}
    assert first == second
