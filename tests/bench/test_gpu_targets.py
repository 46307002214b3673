"""bench/gpu_targets.py reads a gpu_check run's JSON files (a stored H200 run in bench/measured/) and
gives that run's verdicts."""

from __future__ import annotations

from pathlib import Path

from bench import gpu_targets

ROOT = Path(__file__).resolve().parents[2]


def test_verdicts_of_the_stored_h200_run():
    targets = gpu_targets.report(ROOT / "bench" / "measured" / "h200-2026-11-30")
    got = {t.what: (round(t.measured, 2), t.verdict) for t in targets}
    assert got["128x257x1280 bf16: >= 85% of copy bandwidth"] == (72.85, "MISSED")
    assert got["128x257x5120 bf16: >= 85% of copy bandwidth"][1] == "MET"
    assert got["ViT-H group: >= 3x a loop of the eager formula"] == (2.85, "MISSED")
    assert got["ViT-H group: >= 1.3x a loop of torch.compile"][1] == "MET"
    assert got["same: >= 50% of the bf16 mm rate (one triangle)"] == (8.0, "MISSED")
    assert got["max relative distance error (random, shared rows)"][1] == "MISSED"


def test_missing_files_are_not_measured(tmp_path, capsys):
    targets = gpu_targets.report(tmp_path)
    assert targets and all(t.verdict == "NOT MEASURED" for t in targets)
    assert "missing or unreadable" in capsys.readouterr().err
