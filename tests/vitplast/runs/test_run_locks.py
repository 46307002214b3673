"""The lock of a run directory without flock: an atomic create (a hard link) naming its holder, so it
works on shared filesystems; a live holder is refused, a dead one (this host: its PID; another host:
a silent heartbeat; a superseded attempt: at once) taken over, and a writer whose lock was taken over
stops at its next checkpoint."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import vitplast.runs.lock as lock_module
from vitplast.runs.lock import RunBusy, RunDirError, RunLock, attempt
from vitplast.runs.rundir import RunDir


def _plant(directory, age_s: float = 0.0, **holder) -> None:
    """A lock file as another writer left it, last touched ``age_s`` seconds ago."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".lock"
    path.write_text(json.dumps(holder))
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_a_live_holder_is_refused_and_release_removes_the_file(tmp_path):
    first = RunLock(tmp_path).acquire()
    held = json.loads((tmp_path / ".lock").read_text())
    assert held["pid"] == os.getpid() and held["host"] == socket.gethostname() and held["token"]
    with pytest.raises(RunBusy, match=rf"in use by process {os.getpid()} on ") as exc:
        RunLock(tmp_path).acquire()
    assert exc.value.holder["token"] == held["token"]
    assert RunLock(tmp_path).holder() == held
    first.release()
    assert not (tmp_path / ".lock").exists() and RunLock(tmp_path).holder() is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary left either


def test_a_dead_process_on_this_host_is_taken_over(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a PID that ran and is gone
    _plant(tmp_path, pid=proc.pid, host=socket.gethostname(), since="then", token="old")
    taken = RunLock(tmp_path).acquire()
    assert taken.stale["pid"] == proc.pid and taken.stale["alive"] is False
    taken.release()


def test_a_reused_pid_does_not_keep_a_lock(tmp_path):
    # this process's PID, but another start time: the process that wrote the lock is gone
    _plant(tmp_path, pid=os.getpid(), host=socket.gethostname(), start=-1, token="old")
    RunLock(tmp_path).acquire().release()


def test_another_host_is_judged_by_its_heartbeat(tmp_path):
    _plant(tmp_path, pid=1, host="node-elsewhere", since="then", token="far")
    with pytest.raises(RunBusy, match="process 1 on node-elsewhere"):
        RunLock(tmp_path).acquire()  # touched just now: alive for all we know
    _plant(tmp_path, lock_module.STALE_AFTER_S + 5, pid=1, host="node-elsewhere", since="then", token="far")
    taken = RunLock(tmp_path).acquire()
    assert taken.stale["host"] == "node-elsewhere" and taken.stale["alive"] is None
    taken.release()


def test_a_retry_takes_over_the_attempt_it_supersedes_at_once(tmp_path):
    _plant(tmp_path, pid=1, host="node-dead", since="then", token="s-3-0")
    with pytest.raises(RunBusy):
        RunLock(tmp_path).acquire()
    with attempt("s-3-1", supersedes=("s-3-0",), node="n2"):
        taken = RunLock(tmp_path).acquire()
    held = json.loads((tmp_path / ".lock").read_text())
    assert held["token"] == "s-3-1" and held["node"] == "n2" and taken.stale["token"] == "s-3-0"
    taken.release()


def test_an_empty_lock_file_is_a_dead_writer_once_old(tmp_path):
    _plant(tmp_path)  # what the flock lock of earlier versions left behind, or a torn create
    (tmp_path / ".lock").write_text("")
    with pytest.raises(RunBusy, match="another process"):
        RunLock(tmp_path).acquire()  # fresh: it may be a create in progress
    then = time.time() - 2 * lock_module.HEARTBEAT_S
    os.utime(tmp_path / ".lock", (then, then))
    RunLock(tmp_path).acquire().release()


def test_a_takeover_gives_back_a_lock_replaced_meanwhile(tmp_path):
    _plant(tmp_path, pid=1, host="node-b", token="fresh")
    lk = RunLock(tmp_path)
    lk._take_over({"pid": 1, "host": "node-b", "token": "judged-stale"}, "mine")
    assert json.loads((tmp_path / ".lock").read_text())["token"] == "fresh"  # put back, untouched
    assert lk.stale is None and sorted(p.name for p in tmp_path.iterdir()) == [".lock"]


def test_a_writer_whose_lock_was_taken_over_stops_before_writing(tmp_path):
    rd = RunDir(tmp_path / "run").open({"a": 1})
    _plant(tmp_path / "run", pid=1, host="node-c", token="usurper")  # another attempt took it over
    with pytest.raises(RunDirError, match="taken over by process 1 on node-c"):
        rd.save_checkpoint({"step": 1})
    with pytest.raises(RunDirError, match="taken over"):
        rd.write_summary({"x": 1})
    assert not (tmp_path / "run" / "checkpoint.pt").exists()
    rd.close()  # the lock file is the usurper's: it stays
    assert json.loads((tmp_path / "run" / ".lock").read_text())["token"] == "usurper"


def test_the_lock_and_its_temporaries_leave_a_directory_new(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock.abc.1234.tmp").write_text("{}")  # a create killed before its cleanup
    _plant(tmp_path / "run", pid=1, host="x")
    assert RunDir(tmp_path / "run").state() == "new"


def test_no_flock_in_the_lock():
    source = open(lock_module.__file__).read()
    assert "fcntl" not in source and "flock(" not in source
