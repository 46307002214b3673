"""Nothing the scoring service reads back is believed without a check: a criterion's ``NAME.json``, a
``plasticity.json`` and a claim's ``plasticity_chunks.json`` carry a format and a checksum, and their
readers check the schema (every component and layer, shapes agreeing) and the ranges. A cache that fails
is scored again with one line naming the file and why; a file edited by hand with its checksum
recomputed is the user's decision, reused and recorded with its checksum."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from criteria_helpers import tiny_model
from vitplast.criteria import ScoreCache, ScoringRequest, resolve_units, score_criteria
from vitplast.outputs.result_files import ResultFileError, content_checksum, with_checksum

NAMES = ("plasticity", "rgn", "spectral", "size")


def _request() -> ScoringRequest:
    g = torch.Generator().manual_seed(1)
    images, labels = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 3, (8,), generator=g)
    from vitplast.criteria import Batch

    return ScoringRequest(tiny_model, resolve_units(tiny_model(0)), batches=[Batch(images, labels)],
                          pair_batches=lambda: [images], seeds=(0,))


def _cache(folder) -> ScoreCache:
    return ScoreCache(folder, {"model": "tiny"}, context={"device": "cpu"},
                      inputs={"images": {"batches": 1}, "pairs": {"batches": 1}})


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A cache folder holding the four criteria's files, and what they held."""
    cache = _cache(tmp_path_factory.mktemp("scores"))
    first = score_criteria(NAMES, _request(), cache=cache)
    for result in first.values():
        cache.write(result)
    return cache, first


@pytest.fixture
def scored(written, tmp_path):
    """A copy of `written`'s folder for one test to edit."""
    cache, first = written
    shutil.copytree(cache.folder, tmp_path, dirs_exist_ok=True)
    return _cache(tmp_path), first


def _score_again(cache):
    said: list[str] = []
    return score_criteria(NAMES, _request(), cache=cache, say=said.append), said


def _edit(path, change, *, checksum: bool) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    if checksum:  # the user's own edit, checksum recomputed
        doc = with_checksum({k: v for k, v in doc.items() if k != "format"}, kind=doc["format"].split("/")[0],
                            version=int(doc["format"].split("/")[1]))
    path.write_text(json.dumps(doc))


def test_unchanged_files_are_reused_and_recorded_with_their_checksums(scored):
    cache, first = scored
    again, said = _score_again(cache)
    assert set(again.reused) == set(NAMES) and not said
    for n in NAMES:
        doc = json.loads((cache.folder / f"{n}.json").read_text())
        assert again.reused[n].checksum == doc["checksum"] == content_checksum(doc)
        np.testing.assert_array_equal(again[n].values, first[n].values)


def test_one_value_edited_with_its_cache_key_kept_is_scored_again_with_one_line(scored):
    cache, first = scored
    path = cache.folder / "rgn.json"
    original = json.loads(path.read_text())["components"]
    _edit(path, lambda d: d["components"]["MHA"]["per_layer"].__setitem__(0, 1e6), checksum=False)
    again, said = _score_again(cache)
    assert "rgn" not in again.reused and set(again.reused) == set(NAMES) - {"rgn"}
    assert said == [f"rgn: scoring again, {path}: checksum: does not match the content: the file was edited "
                    "or damaged after it was written"]
    np.testing.assert_array_equal(again["rgn"].values, first["rgn"].values)
    cache.write(again["rgn"])
    assert json.loads(path.read_text())["components"] == original  # the same scores again


@pytest.mark.parametrize("checksum", [False, True])
def test_a_component_deleted_from_spectral_json_is_scored_again(scored, checksum):
    cache, first = scored
    path = cache.folder / "spectral.json"
    _edit(path, lambda d: d["components"].pop("MHA"), checksum=checksum)
    again, said = _score_again(cache)
    assert "spectral" not in again.reused and len(said) == 1
    assert said[0].startswith(f"spectral: scoring again, {path}: ")
    assert ("components: lacks MHA" if checksum else "checksum") in said[0]
    assert again["spectral"].components == first["spectral"].components


@pytest.mark.parametrize("checksum", [False, True])
def test_plasticity_json_with_its_sums_multiplied_is_measured_again(scored, checksum):
    cache, first = scored
    path = cache.folder / "plasticity.json"

    def multiply(doc):
        for entry in doc["components"].values():
            entry["sums"] = [[v * 3 for v in row] for row in entry["sums"]]

    _edit(path, multiply, checksum=checksum)
    again, said = _score_again(cache)
    assert "plasticity" not in again.reused and len(said) == 1
    assert ("n_pairs" if checksum else "checksum") in said[0] and str(path) in said[0]
    np.testing.assert_array_equal(again["plasticity"].values, first["plasticity"].values)


def test_an_edit_kept_consistent_with_its_checksum_is_the_users_decision(scored):
    cache, first = scored
    path = cache.folder / "size.json"

    def smaller(doc):
        doc["components"]["LN1"]["per_layer"] = [1.0, 1.0]
        doc["components"]["LN1"]["overall"] = 2.0

    _edit(path, smaller, checksum=True)
    again, said = _score_again(cache)
    assert not said and again["size"].overall("LN1") == 2.0
    assert again.reused["size"].checksum == json.loads(path.read_text())["checksum"]


@pytest.mark.parametrize("change, field", [
    (lambda d: d["components"]["LN1"].__setitem__("overall", 5.0), "components.LN1.overall"),
    (lambda d: d["components"]["LN1"]["per_layer"].append(1.0), "components.LN1.per_layer"),
    (lambda d: d["components"]["LN1"]["per_layer"].__setitem__(0, "x"), "components.LN1.per_layer[0]"),
    (lambda d: d["cost"].__setitem__("forwards", -1), "cost.forwards"),
    (lambda d: d.__setitem__("layer_reduce", "max"), "layer_reduce"),
])
def test_the_reader_names_the_field_at_fault(scored, change, field):
    cache, _ = scored
    path = cache.folder / "size.json"
    _edit(path, change, checksum=True)
    from vitplast.criteria import CriterionResult

    with pytest.raises(ResultFileError) as exc:
        CriterionResult.from_json(path)
    assert exc.value.field == field and exc.value.path == str(path)


def test_chunk_statistics_are_checked_when_read_back(tmp_path):
    from vitplast.claim.measurement import read_chunks, write_chunks

    stats = np.ones((2, 1, 2, 5)).tolist()
    measured = {"components": ["MHA"], "layers": ["0", "1"], "stats": stats, "pairs": 4, "chunks": 2,
                "config": {"pairs": 4}}
    path = tmp_path / "plasticity_chunks.json"
    checksum = write_chunks(path, measured)
    assert read_chunks(path)["checksum"] == checksum
    _edit(path, lambda d: d.__setitem__("chunks", 3), checksum=True)
    with pytest.raises(ResultFileError, match="stats: has shape"):
        read_chunks(path)
    write_chunks(path, {**measured, "stats": (-np.ones((2, 1, 2, 5))).tolist()})
    with pytest.raises(ResultFileError, match=r"stats: count #0: -1.0 is outside \[0, inf\]"):
        read_chunks(path)
    path.write_text(path.read_text()[:40])
    with pytest.raises(ResultFileError, match=f"{path}: not valid JSON"):
        read_chunks(path)


DIGITS = {"epochs": 1, "depth": 2, "embed_dim": 32, "num_heads": 2, "batch_size": 256, "warmup_epochs": 0}


@pytest.mark.slow
def test_measure_rescores_an_edited_rgn_json_and_records_what_it_reused(tmp_path, capsys):
    import vitplast.models.digits as digits
    from vitplast.cli import main

    cache = tmp_path / "cache"
    digits.digits_checkpoint(cache, seed=0, progress=False, config=digits.DigitsConfig(**DIGITS))
    m1 = tmp_path / "m1"
    argv = ["measure", "--cache-dir", str(cache), "--pretrain-config", json.dumps(DIGITS), "--batches", "1",
            "--batch-size", "8", "--criterion", "plasticity,rgn,size", "--criterion-batches", "1",
            "--out", str(m1), "--no-progress"]
    assert main(argv) == 0
    first = {n: json.loads((m1 / f"{n}.json").read_text()) for n in ("rgn", "size")}
    _edit(m1 / "rgn.json", lambda d: d["components"]["MHA"]["per_layer"].__setitem__(0, 7.5), checksum=False)
    _edit(m1 / "plasticity.json", lambda d: d["components"]["MHA"]["sums"][0].__setitem__(0, 1e9),
          checksum=True)
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"rgn: scoring again, {m1 / 'rgn.json'}: checksum: does not match the content" in out
    assert f"plasticity: scoring again, {m1 / 'plasticity.json'}: components.MHA.n_pairs" in out
    assert "size: reused" in out and "rgn: reused" not in out
    rgn = json.loads((m1 / "rgn.json").read_text())
    assert rgn["components"] == first["rgn"]["components"]  # scored again, the same scores
    assert rgn["components"]["MHA"]["per_layer"][0] == float((m1 / "rgn.csv").read_text().splitlines()[3]
                                                              .split(",")[2])
    run = json.loads((m1 / "run.json").read_text())
    assert run["reused_files"] == [{"path": str(m1 / "size.json"), "checksum": first["size"]["checksum"]}]
    assert run["criteria"]["size"]["reused"] and not run["criteria"]["rgn"]["reused"]


@pytest.mark.slow
def test_claim_rescores_an_edited_size_json(tmp_path):
    import warnings

    from helpers import collecting
    from vitplast.claim import claim

    kw = dict(random_init=True, optimizer="adamw", components="MHA,FC1,LN1", lr="3e-3", seed="0", steps=2,
              batch_size=16, eval_limit=32, pairs=32, pair_batch=16, bootstrap=20, permutations=20, jobs=1,
              threads=1, progress=False, criteria="plasticity,size", out=str(tmp_path / "c"))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no weights given.*")
        first = claim(**kw, reporter=collecting([]))
        size = tmp_path / "c" / "criteria" / "size.json"
        chunks = tmp_path / "c" / "plasticity_chunks.json"
        sizes = json.loads(size.read_text())["components"]
        _edit(size, lambda d: d["components"]["LN1"].__setitem__("overall", 1e9), checksum=False)
        said: list[str] = []
        again = claim(**kw, reporter=collecting(said))
    assert any(s.startswith(f"size: scoring again, {size}: checksum") for s in said)
    assert json.loads(size.read_text())["components"] == sizes
    assert again.analysis.criteria == first.analysis.criteria
    # claim.json records the files it reused (the chunks here, not the size.json scored again), with checksums
    recorded = json.loads((tmp_path / "c" / "claim.json").read_text())["measurement"]["reused_files"]
    assert again.measurement["reused_files"] == recorded == [
        {"path": str(chunks), "checksum": json.loads(chunks.read_text())["checksum"]}]


@pytest.mark.parametrize("field_name, value, words", [
    ("criterion", "size", "criterion: 'size', not 'rgn'"),
    ("cache_key", "0" * 64, "was scored with other inputs or options"),
])
def test_another_criterion_or_key_in_a_file_edited_with_its_checksum_is_scored_again(
        scored, field_name, value, words):
    """rgn.json claiming to hold size's scores, or another cache key, checksum recomputed: scored again
    with one line naming the file (never reused as rgn's, never silently)."""
    cache, first = scored
    path = cache.folder / "rgn.json"
    if field_name == "criterion":
        _edit(path, lambda d: d.__setitem__("criterion", value), checksum=True)
    else:
        _edit(path, lambda d: d["meta"].__setitem__("cache_key", value), checksum=True)
    again, said = _score_again(cache)
    assert "rgn" not in again.reused and len(said) == 1
    assert said[0].startswith("rgn: scoring again, ") and str(path) in said[0] and words in said[0]
    np.testing.assert_array_equal(again["rgn"].values, first["rgn"].values)


def test_per_layer_scores_edited_without_their_per_seed_scores_are_scored_again(scored):
    """rgn's scores are the mean of its per-seed scores: an edit of one kept consistent with its
    checksum but not with the other is not the user's decision, it is a file that cannot be."""
    cache, first = scored
    path = cache.folder / "rgn.json"

    def edit(doc):
        entry = doc["components"]["MHA"]
        entry["per_layer"][0] *= 2
        finite = [v for v in entry["per_layer"] if v is not None]
        entry["overall"] = sum(finite) / len(finite)

    _edit(path, edit, checksum=True)
    again, said = _score_again(cache)
    assert "rgn" not in again.reused and len(said) == 1, said
    assert said[0].startswith(f"rgn: scoring again, {path}: components.MHA.per_layer[0]: ")
    assert "is not the mean of its per-seed scores" in said[0]
    np.testing.assert_array_equal(again["rgn"].values, first["rgn"].values)


@pytest.mark.parametrize("name, value, words", [
    ("size", -5.0, "per_layer[0]: -5.0 is not a whole number in [0, inf], the range of size"),
    ("size", 2.5, "is not a whole number in [0, inf]"),
    ("spectral", 0.5, "is not in [1, inf], the range of spectral"),
    ("rgn", -1.0, "is not in [0, inf], the range of rgn"),
])
def test_scores_no_criterion_can_give_are_scored_again(scored, name, value, words):
    """A value outside what the criterion can give (a negative parameter count, a power-law exponent
    below 1), even with its overall and checksum made consistent, is recomputed with one line."""
    cache, first = scored
    path = cache.folder / f"{name}.json"

    def edit(doc):
        entry = doc["components"]["LN1"]
        entry["per_layer"] = [value] * len(entry["per_layer"])
        for seed in entry.get("per_seed", {}):
            entry["per_seed"][seed] = list(entry["per_layer"])
        entry["overall"] = value * (len(entry["per_layer"]) if doc["layer_reduce"] == "sum" else 1)

    _edit(path, edit, checksum=True)
    again, said = _score_again(cache)
    assert name not in again.reused and len(said) == 1, said
    assert str(path) in said[0] and "components.LN1." in said[0] and words in said[0], said
    np.testing.assert_array_equal(again[name].values, first[name].values)
