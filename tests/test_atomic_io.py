"""vitplast_kernels.atomic_io: a signal in the middle of a write comes out as the plain interruption,
after the file is complete (raised inside ``torch.save``'s write callback, a Ctrl-C tears the zip
writer and ends as an unrelated RuntimeError)."""

from __future__ import annotations

import io
import os
import signal

import pytest
import torch

from vitplast_kernels.atomic_io import atomic_write, atomic_write_bytes, signals_deferred


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt in these tests even where pytest started with SIGINT ignored (a
    background job of a non-interactive shell: Python then installs no handler)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class SignallingFile(io.RawIOBase):
    """Writes to ``f``, sending this process ``signum`` on the write calls numbered in ``at``: the
    handler then runs inside ``torch.save``'s Python write callback, as a Ctrl-C at the wrong moment."""

    def __init__(self, f, signum: int, at: tuple[int, ...]) -> None:
        self.f, self.signum, self.at, self.calls = f, signum, at, 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.calls += 1
        if self.calls in self.at:
            os.kill(os.getpid(), self.signum)
        return self.f.write(b)


def _save_with_signal(path, state, signum, at):
    def fill(tmp: str) -> None:
        with open(tmp, "wb") as f:
            torch.save(state, SignallingFile(f, signum, at))

    atomic_write(path, fill)


def test_ctrl_c_inside_torch_save_finishes_the_file_then_interrupts(tmp_path):
    state = {"w": torch.randn(1000), "step": 7}
    with pytest.raises(KeyboardInterrupt):
        _save_with_signal(tmp_path / "c.pt", state, signal.SIGINT, at=(2,))
    got = torch.load(tmp_path / "c.pt")
    assert torch.equal(got["w"], state["w"]) and got["step"] == 7
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_abandons_the_write_and_keeps_the_old_file(tmp_path):
    torch.save({"step": 1}, tmp_path / "c.pt")
    with pytest.raises(BaseException):  # noqa: B017 - a torn writer may wrap the KeyboardInterrupt
        _save_with_signal(tmp_path / "c.pt", {"w": torch.randn(1000), "step": 2}, signal.SIGINT, at=(2, 3))
    assert torch.load(tmp_path / "c.pt") == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_command_handler_for_sigterm_runs_after_the_write(tmp_path):
    seen = []

    def handler(signum, frame):
        seen.append(signum)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(SystemExit):
            _save_with_signal(tmp_path / "c.pt", {"step": 3}, signal.SIGTERM, at=(1,))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [signal.SIGTERM] and torch.load(tmp_path / "c.pt") == {"step": 3}


def test_ignored_and_default_dispositions_are_left_alone():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with signals_deferred():
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # deferred
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_directory_in_the_files_place_is_named_not_the_temporary_file(tmp_path):
    """os.replace onto a directory names the temporary file; the writer names the path and leaves
    nothing behind."""
    (tmp_path / "claim.json").mkdir()
    with pytest.raises(IsADirectoryError) as exc:
        atomic_write_bytes(tmp_path / "claim.json", b"{}")
    assert exc.value.filename == str(tmp_path / "claim.json") and "move it away" in str(exc.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claim.json"]
