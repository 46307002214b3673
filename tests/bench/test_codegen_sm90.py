"""The Triton kernels compiled ahead of time for sm_90 (H200) keep their code-generation properties:
the Gram loop software-pipelined on wgmma, no kernel spilling, the contiguous grouped kernel small
enough for several programs per SM (bench/codegen_sm90.py --check, in a subprocess: the kernels of
this process are interpreted). Needs no GPU, only triton's bundled ptxas."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_kernels_compile_for_sm90_as_expected():
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "codegen_sm90.py"), "--check"], env=env,
                         capture_output=True, text=True, timeout=600)
    if run.returncode == 3:
        pytest.skip(run.stderr.strip())
    assert run.returncode == 0, run.stdout + run.stderr
    assert "_gram_partial_kernel" in run.stdout and "_stage1_grouped" in run.stdout
