"""Result files: format and checksum written with the content, and every way a file read back can be
wrong (not JSON, not an object, another kind, an unknown version, no checksum, content edited after the
checksum) refused with the file's name and the field."""

from __future__ import annotations

import json
import math

import pytest
from vitplast.outputs import result_files as rf
from vitplast.outputs.result_files import ResultFileError


def test_round_trip_keeps_content_and_version(tmp_path):
    path = tmp_path / "r.json"
    payload = {"value": 0.25, "rows": [1, 2, None], "name": "MHA"}
    checksum = rf.write_result_json(path, payload, kind="vitplast-test", version=3)
    doc, version = rf.read_result_json(path, kind="vitplast-test", versions={2, 3})
    assert version == 3
    assert doc["checksum"] == checksum == rf.content_checksum(doc)
    assert {k: doc[k] for k in payload} == payload
    assert doc["format"] == "vitplast-test/3"


@pytest.mark.parametrize("edit, field_name, words", [
    (lambda d: d.update(value=7.5), "checksum", "edited or damaged"),
    (lambda d: d.pop("checksum"), "checksum", "missing"),
    (lambda d: d.update(format="vitplast-test/9"), "format", "not read by this release"),
    (lambda d: d.update(format="other/1"), "format", "not a vitplast-test file"),
])
def test_edited_files_are_refused_naming_file_and_field(tmp_path, edit, field_name, words):
    path = tmp_path / "r.json"
    rf.write_result_json(path, {"value": 0.25}, kind="vitplast-test", version=1)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultFileError) as info:
        rf.read_result_json(path, kind="vitplast-test", versions={1})
    assert info.value.field == field_name and words in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text, words", [('{"value": 0.2', "not valid JSON"), ("[1, 2]", "not an object")])
def test_damaged_files_name_the_file(tmp_path, text, words):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(ResultFileError, match=words) as info:
        rf.read_result_json(path, kind="vitplast-test", versions={1})
    assert str(path) in str(info.value)


def test_missing_file_and_directory_are_refused(tmp_path):
    with pytest.raises(ResultFileError, match="no such file"):
        rf.read_result_json(tmp_path / "absent.json", kind="k", versions={1})
    with pytest.raises(ResultFileError, match="not a regular file"):
        rf.read_result_json(tmp_path, kind="k", versions={1})


def test_checksum_recomputed_by_hand_is_believed(tmp_path):
    path = tmp_path / "r.json"
    rf.write_result_json(path, {"value": 0.25}, kind="k", version=1)
    doc = json.loads(path.read_text())
    doc["value"] = 0.5
    doc["checksum"] = rf.content_checksum(doc)
    path.write_text(json.dumps(doc, indent=4))  # layout does not matter, content does
    assert rf.read_result_json(path, kind="k", versions={1})[0]["value"] == 0.5


def test_field_number_count_checks(tmp_path):
    doc = {"acc": 7.5, "n": -1, "flag": True, "name": "x", "loss": None}
    assert rf.field(doc, "name", "f.json", str) == "x"
    with pytest.raises(ResultFileError, match="f.json: run.missing: missing"):
        rf.field(doc, "missing", "f.json", where="run")
    with pytest.raises(ResultFileError, match="is a bool, expected int"):
        rf.field(doc, "flag", "f.json", int)
    with pytest.raises(ResultFileError, match=r"best_acc: 7.5 is outside \[0, 1\]"):
        rf.checked_number(doc["acc"], "f.json", "best_acc", lo=0, hi=1)
    assert math.isnan(rf.checked_number(doc["loss"], "f.json", "loss", nullable=True))
    with pytest.raises(ResultFileError, match="not a number"):
        rf.checked_number(doc["loss"], "f.json", "loss")
    with pytest.raises(ResultFileError, match="not finite"):
        rf.checked_number(float("inf"), "f.json", "loss")
    with pytest.raises(ResultFileError, match="not a count"):
        rf.count(doc["n"], "f.json", "n")
    assert rf.count(3, "f.json", "n") == 3
