"""bench/harness.py: timing statistics, floors, tables and atomic JSON records (fast, CPU)."""

from __future__ import annotations

import json
import time

import pytest
import torch

from bench import harness


def test_time_fn_measures_what_it_runs():
    t = harness.time_fn(lambda: time.sleep(0.01), reps=5, warmup=0)
    assert t.reps == 5 and len(t.times) == 5
    assert 0.009 < t.median < 0.2
    assert t.q10 <= t.median <= t.q90


def test_time_fn_stops_on_min_time_and_min_reps():
    calls = []
    t = harness.time_fn(lambda: calls.append(1), warmup=2, min_time=0.0, min_reps=7)
    assert t.reps == 7 and len(calls) == 9  # 2 warm-up + 7 timed


def test_quantiles_interpolate():
    assert harness._quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.1) == pytest.approx(1.4)
    assert harness._quantile([3.0], 0.9) == 3.0


def test_time_interleaved_reports_per_call_times_of_batched_samples():
    fast = []
    t = harness.time_interleaved({"sleep": lambda: time.sleep(0.002), "fast": lambda: fast.append(1)},
                                 min_time=0.0, min_rounds=3, min_sample=0.004)
    assert t["sleep"].reps == t["fast"].reps == 3
    assert 0.0015 < t["sleep"].median < 0.05  # per call, although a sample held >= 2 calls
    assert len(fast) > 3 * 10  # many calls per sample for the fast function
    assert t["fast"].median < t["sleep"].median


def test_floor_probe_counts_the_bytes_it_reads():
    fn, nbytes, name = harness.floor_probe("cpu", nbytes=4 * 2**20)
    assert nbytes == 4 * 2**20 and name == "read bandwidth"
    assert fn().item() == 1.0
    assert harness.tensor_bytes(torch.empty(3, 5, dtype=torch.bfloat16), torch.empty(2)) == 3 * 5 * 2 + 2 * 4


def test_machine_info_names_versions():
    info = harness.machine_info("cpu")
    assert info["torch"] == torch.__version__ and info["cpu_cores"] >= 1
    assert info["torch"] in harness.machine_line(info)


def test_format_table_aligns_and_formats():
    rows = [{"a": "x", "b": 1.23456, "c": None}, {"a": "long name", "b": float("nan"), "c": 3}]
    text = harness.format_table(rows, [("a", "name", None), ("b", "value", ".2f"), ("c", "n", None)])
    lines = text.splitlines()
    assert lines[0].split() == ["name", "value", "n"]
    assert "1.23" in lines[2] and "nan" in lines[3] and lines[2].rstrip().endswith("-")
    assert len({len(line) for line in lines}) == 1  # fixed width


def test_write_json_is_atomic_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "r.json"
    harness.write_json(path, {"t": harness.Timing(1.0, 0.5, 2.0, 3, (1.0,)), "d": torch.bfloat16})
    assert json.loads(path.read_text()) == {"t": {"median": 1.0, "q10": 0.5, "q90": 2.0, "reps": 3},
                                             "d": "bfloat16"}
    with pytest.raises(TypeError):
        harness.write_json(path, {"bad": object()})
    assert json.loads(path.read_text())["d"] == "bfloat16"  # the old record survives a failed write
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]


def test_rel_error():
    assert harness.rel_error(torch.tensor([1.0, 2.2]), torch.tensor([1.0, 2.0])) == pytest.approx(0.1)


def test_pin_allocator_says_what_it_did():
    # whether a pinned heap then reuses a freed block depends on the heap's layout (a 16 MiB
    # torch.empty().fill_() loop in fresh processes took 0 or 4096 faults per iteration from the third
    # on): what is tested is the call and its report; the effect is measured by bench.compare
    line = harness.pin_allocator()
    assert line.startswith("allocator: ")
    assert harness.pin_allocator() == line  # idempotent


def test_minor_faults_count_fresh_pages():
    import mmap

    before = harness.minor_faults()
    with mmap.mmap(-1, 2**22) as m:  # 1024 fresh pages, touched once each
        for i in range(0, 2**22, 4096):
            m[i] = 1
    assert harness.minor_faults() - before >= 1000


def test_per_round_ratio_is_the_median_of_the_rounds_ratios():
    # a drift that doubles both functions' times in the last round leaves the per-round ratio at 2
    assert harness.per_round_ratio([2.0, 4.0, 8.0], [1.0, 2.0, 4.0]) == 2.0
    assert harness.per_round_ratio([3.0, 2.0, 10.0], [1.0, 2.0, 2.0]) == 3.0
    with pytest.raises(ValueError):
        harness.per_round_ratio([1.0, 2.0], [1.0])
