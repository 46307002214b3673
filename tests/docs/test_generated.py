"""The documentation's generated files (``make docs-data``, ``docs/generate.py``) are what the commands
print: the demo and the comparison rerun here and are compared with the committed files, and the pages
include those files rather than copies of them."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "docs" / "generated"
sys.path.insert(0, str(ROOT / "docs"))
import generate  # noqa: E402  (docs/generate.py: the functions that cut the printed tables)

NUMBER = re.compile(r"[-+]?\d+\.\d+")
# one unit in the last printed place: another CPU's float rounding may move a rounded digit by one
PRINTED_TOLERANCE = 1.5e-3
JSON_RTOL = 1e-6  # the measurement's own float rounding across CPUs (the weights ship with the package)


def _run(argv: list[str], monkeypatch) -> str:
    from vitplast.cli import main

    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def _same_numbers(printed: str, committed: str, tolerance: float) -> None:
    assert NUMBER.sub("#", printed) == NUMBER.sub("#", committed), "the table's layout or labels changed"
    for got, want in zip(NUMBER.findall(printed), NUMBER.findall(committed), strict=True):
        assert abs(float(got) - float(want)) <= tolerance, (got, want)


def _close(got, want, path: str = "") -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), path
        for k in want:
            _close(got[k], want[k], f"{path}/{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{path}/{i}")
    elif isinstance(want, float) and isinstance(got, float) and math.isfinite(want):
        assert math.isclose(got, want, rel_tol=JSON_RTOL, abs_tol=1e-9), (path, got, want)
    else:
        assert got == want, (path, got, want)


def test_the_demo_prints_the_committed_table(tmp_path, monkeypatch):
    printed = _run(["measure", "--out", str(tmp_path / "demo"), "--no-progress"], monkeypatch)
    _same_numbers(generate.printed_table(printed), (GENERATED / "demo" / "table.txt").read_text(),
                  PRINTED_TOLERANCE)
    got = json.loads((tmp_path / "demo" / "plasticity.json").read_text())
    want = json.loads((GENERATED / "demo" / "plasticity.json").read_text())
    _close(got["components"], want["components"])


def test_compare_of_the_committed_runs_prints_the_committed_table(tmp_path, monkeypatch):
    printed = _run(["compare", "docs/generated/demo", "docs/generated/after", "--labels",
                    "pretrained,finetuned-MHA", "--out", str(tmp_path / "compare")], monkeypatch)
    assert generate.compare_table(printed) == (GENERATED / "compare" / "table.txt").read_text()


def test_pages_include_the_generated_files_not_copies():
    pages = {p: p.read_text() for p in (ROOT / "docs").rglob("*.md")}
    # a snippet may name a line range after its path: "FILE:START:END"
    included = {m for text in pages.values() for m in re.findall(r'--8<-- "([^":]+)(?::\d+:\d+)?"', text)}
    assert {"docs/generated/demo/table.txt", "docs/generated/compare/table.txt"} <= included
    assert all((ROOT / path).is_file() for path in included)
    images = {m for text in pages.values() for m in re.findall(r"\]\(\.\./(generated/[^)]+\.png)\)", text)}
    assert len(images) >= 10 and all((ROOT / "docs" / path).is_file() for path in images)
    assert not list((ROOT / "docs" / "assets").glob("*.png")), "figures are generated, not kept by hand"
    sources = json.loads((GENERATED / "SOURCES.json").read_text())
    assert set(sources) == set(generate.PARTS)
    assert all({"commands", "cpu", "date", "torch"} <= set(s) for s in sources.values())


@pytest.mark.parametrize("part", ["nonsense"])
def test_an_unknown_part_is_refused(part, capsys):
    assert generate.main([part]) == 2
    assert "unknown part" in capsys.readouterr().err


def test_the_claim_tables_are_made_from_the_committed_claim():
    """The claim guide's tables (each arm's ``tables.md``, and the aggregate's) are what `claim_tables`
    and `aggregate_tables` make of the committed ``claim.json`` files and ``aggregate.json``: the
    verdicts, every ranked unit, criterion and arm, in Markdown tables."""
    folder = GENERATED / "claim"
    arms = sorted(p.parent for p in folder.glob("*/claim.json"))
    assert [a.name for a in arms] == ["digits_5-9-adamw", "digits_5-9-sgd"]  # the default: two optimisers
    for arm in arms:
        doc = json.loads((arm / "claim.json").read_text())
        tables = generate.claim_tables(doc)
        assert (arm / "tables.md").read_text() == tables
        assert tables.startswith(f"**Verdict:** {doc['analysis']['verdict']}")
        assert all(f"| {r['unit']} |" in tables for r in doc["analysis"]["rows"])
        assert all(f"| {c['criterion']} |" in tables for c in doc["analysis"]["criteria"])
    agg = json.loads((folder / "aggregate.json").read_text())
    tables = generate.aggregate_tables(agg)
    assert (folder / "tables.md").read_text() == tables and tables.startswith("**Verdict over the arms:**")
    assert all(f"| {name} |" in tables for name in agg["aggregate"]["datasets"])
