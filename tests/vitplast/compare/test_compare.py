"""`vitplast compare`: two or more saved measurements side by side (CLI and Python), the statistics of
the table checked against the results' own values, the output set, and the bad input that stops it with
one line and exit status 2."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch
from vitplast.cli import main
from vitplast.compare import compare
from vitplast.outputs.reporter import Reporter

import vitplast_kernels as vk

COMPS = ("LN1", "MHA")


def _result(gen, scale: float, layers: int = 3) -> vk.PlasticityResult:
    """A measurement of two components over ``layers`` layers: outputs ``scale`` times the inputs
    (plus noise), so MHA's rates sit near ``scale``."""
    acts = {}
    for c, s in zip(COMPS, (0.5, scale), strict=True):
        acts[c] = []
        for _ in range(layers):
            x = torch.randn(16, 4, 8, generator=gen)
            acts[c].append((x, s * x + 0.1 * torch.randn(16, 4, 8, generator=gen)))
    return vk.pairwise_plasticity(acts)


@pytest.fixture
def runs(tmp_path, gen):
    paths = []
    for name, scale in (("before", 1.0), ("after", 1.5)):
        (tmp_path / name).mkdir()
        _result(gen, scale).to_json(tmp_path / name / "plasticity.json")
        paths.append(tmp_path / name)
    return paths


def test_cli_writes_the_set_and_the_table_holds_the_results_values(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(runs[0]), str(runs[1] / "plasticity.json"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "differences against 'before'" in text and "after - before" in text
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.json", "compare.png",
                                                      "compare.txt"]
    assert (out / "compare.png").stat().st_size > 10_000
    a, b = (vk.PlasticityResult.from_json(p / "plasticity.json") for p in runs)
    data = json.loads((out / "compare.json").read_text())
    assert data["format"] == "vitplast-compare/1"
    assert [r["label"] for r in data["runs"]] == ["before", "after"]
    mha = data["components"]["MHA"]
    assert mha["overall"][1]["mean"] == pytest.approx(b.overall("MHA"), rel=1e-12)
    sem = math.sqrt(sum(s ** 2 for s in b.sem("MHA").tolist())) / 3
    assert mha["overall"][1]["sem"] == pytest.approx(sem, rel=1e-12)
    diff = mha["overall_minus_first"][1]
    assert diff["mean"] == pytest.approx(b.overall("MHA") - a.overall("MHA"), rel=1e-12)
    assert diff["ci"][0] > 0.3  # outputs 1.5x against 1x: clearly more plastic
    with open(out / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * len(COMPS) * 4  # runs x components x (3 layers + the mean)
    row = next(r for r in rows if r["run"] == "after" and r["component"] == "LN1" and r["layer"] == "1")
    assert float(row["mean"]) == b.mean("LN1")[1].item() and int(row["n_pairs"]) == 8
    assert (out / "compare.txt").read_text().strip() == text.split("\nwrote ")[0].strip()


def test_python_api_labels_and_components(runs):
    lines = []
    cmp = compare(runs=[str(p) for p in runs], labels=["pretrained", "finetuned"], components=["MHA"],
                  reporter=Reporter(lines.append))
    assert cmp.labels == ["pretrained", "finetuned"] and cmp.components == ("MHA",)
    assert "ranking finetuned: MHA" in lines[0]
    assert cmp.difference("MHA", 0).mean == 0.0


@pytest.mark.parametrize("argv, message", [
    (["{a}"], "give at least two measurements"),
    (["{a}", "{missing}"], "no such file or directory"),
    (["{a}", "{empty}"], "no plasticity.json in this directory"),
    (["{a}", "{finetune}"], "it is a finetune run; measure its weights first: vitplast measure --weights"),
    (["{a}", "{junk}"], "not a plasticity result written by vitplast"),
    (["{a}", "{deeper}"], "has 5 layers, 'before' 3: compare measurements of the same model"),
    (["{a}", "{a}", "--labels", "x"], "--labels: 1 name(s) for 2 runs"),
    (["{a}", "{a}", "--components", "FC9"], "--components: FC9 measured by no run"),
])
def test_bad_input_is_one_line_and_status_2(runs, tmp_path, gen, capsys, argv, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "finetune").mkdir()
    (tmp_path / "finetune" / "metrics.jsonl").write_text("")
    (tmp_path / "junk.json").write_text("{}")
    (tmp_path / "deeper").mkdir()
    _result(gen, 1.0, layers=5).to_json(tmp_path / "deeper" / "plasticity.json")
    paths = {"a": runs[0], "missing": tmp_path / "nope", "empty": tmp_path / "empty",
             "finetune": tmp_path / "finetune", "junk": tmp_path / "junk.json", "deeper": tmp_path / "deeper"}
    assert main(["compare", *[a.format(**paths) for a in argv]]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("vitplast compare: error: ") and message in err[0], err


def test_a_measured_file_edited_since_is_refused_naming_file_and_field(runs, capsys):
    """A plasticity.json that `vitplast measure` wrote carries a checksum: an edit made since (a sum
    multiplied, the sums still possible) is refused with one line, exit status 2; the kernels' own
    files (no checksum) are still read."""
    from vitplast.outputs.result_files import write_result_json

    before = runs[0] / "plasticity.json"
    payload = json.loads(before.read_text())
    write_result_json(before, payload, kind="vitplast-plasticity", version=1)
    assert main(["compare", str(runs[0]), str(runs[1]), "--out", str(runs[0].parent / "ok")]) == 0
    capsys.readouterr()
    doc = json.loads(before.read_text())
    doc["components"]["MHA"]["sums"][0][1] *= 2.0
    before.write_text(json.dumps(doc))
    rc = main(["compare", str(runs[0]), str(runs[1]), "--out", str(runs[0].parent / "edited")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert str(before) in err[0] and "checksum: does not match the content" in err[0]
    assert not (runs[0].parent / "edited").exists()
    # the checksum taken out with the edit: the file still says vitplast measure wrote it (its cache key)
    doc.pop("checksum")
    doc["meta"]["cache_key"] = "0" * 64
    before.write_text(json.dumps(doc))
    rc = main(["compare", str(runs[0]), str(runs[1]), "--out", str(runs[0].parent / "stripped")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "checksum: missing" in err[0]

