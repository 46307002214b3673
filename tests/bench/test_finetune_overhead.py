"""``python -m bench.finetune_overhead`` runs the driver's own step with and without its recorder (it
imported a class renamed long ago, and nothing ran it)."""

from __future__ import annotations

import json

from bench import finetune_overhead


def test_the_finetune_overhead_bench_runs_and_writes_its_numbers(tmp_path, capsys):
    out = tmp_path / "overhead.json"
    assert finetune_overhead.main(["--img-size", "32", "--batch-size", "4", "--min-time", "0", "--min-rounds",
                                   "2", "--train", "MHA", "--threads", "1", "--json", str(out)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert row["train"] == "MHA" and row["plain_ms"] > 0 and row["monitored_ms"] > 0
    assert "monitored / plain" in capsys.readouterr().out
