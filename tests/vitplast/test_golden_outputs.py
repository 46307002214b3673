"""Golden outputs: the default demo (``vitplast measure``), a one-run finetune, a finetune grid, a claim
and a two-shard claim, each run at tiny settings and compared with what they wrote when the files of
``tests/vitplast/golden/`` were recorded. A change that moves code without meaning to change results
must leave them as they are.

Cross-CPU rounding: every scenario runs on one thread, from weights that do not depend on the machine
(the committed one-epoch digits checkpoint for the demo, a seeded random init otherwise). On the machine
that recorded them (same CPU model, instruction set that ATen dispatches to, torch version) the outputs
must be equal to the bit. Elsewhere the kernels round differently (another SIMD width sums in another
order): there the primary numbers (plasticity statistics, losses, accuracies, parameter counts and every
string and integer of the files) are compared within tolerances that cover a few steps of float32
rounding drift, and the derived rank statistics of the claim's analysis, which a near tie may flip, are
left out. Keys that outputs gained since the recording (a new option in a config) are not compared; a
key that went missing is a difference. Wall times, versions, the model's description and the
reproducibility record are not results and are left out.

To record them again (after a change that is meant to change results): ``VITPLAST_UPDATE_GOLDEN=1
pytest tests/vitplast/test_golden_outputs.py``, and say in the commit why the numbers moved.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
from pathlib import Path

import pytest
import torch
import vitplast.models.digits as digits
from helpers import quiet
from vitplast.claim import claim
from vitplast.cli import main as cli_main

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("VITPLAST_UPDATE_GOLDEN") == "1"
TINY = {"epochs": 1, "depth": 2, "embed_dim": 32, "num_heads": 2, "batch_size": 256, "warmup_epochs": 0}
# wall times (and every key ending in _seconds); library versions (in the fingerprint); the model's
# description and the reproducibility record (wording and metadata that other changes may extend, not
# results); a result file's checksum (a hash of its content, wall times included) and a cache's key (a
# hash of the reproducibility record, temporary folders included)
VOLATILE = {"seconds", "train_seconds", "versions", "model_desc", "provenance", "checksum", "cache_key"}
ANALYSIS_DERIVED = {"correlations", "params_correlations", "trend", "ranking", "verdict"}
TRAINING = ["--random-init", "--optimizer", "adamw", "--steps", "4", "--batch-size", "16", "--eval-limit",
            "64", "--threads", "1", "--no-progress"]
CLAIM = dict(random_init=True, optimizer="adamw", components="MHA,FC1,LN1", lr="3e-3", seed="0,1", steps=4,
             batch_size=16, eval_limit=64, pairs=32, pair_batch=16, bootstrap=50, permutations=100, jobs=1,
             threads=1, progress=False, reporter=quiet())
RTOL = 1e-3  # float32 drift of a few training steps, relative
ATOL = 1e-5
ACC_ATOL = 2 / 64  # two of the 64 evaluation images change class


def fingerprint() -> dict:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "isa": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}


def normalised(obj, roots: dict[str, str]):
    """``obj`` without wall times and versions, with the temporary folders named by placeholders."""
    if isinstance(obj, dict):
        return {k: normalised(v, roots) for k, v in obj.items()
                if k not in VOLATILE and not k.endswith("_seconds")}
    if isinstance(obj, list):
        return [normalised(v, roots) for v in obj]
    if isinstance(obj, str):
        for root, name in roots.items():
            obj = obj.replace(root, name)
    return obj


def digest(out: Path, roots: dict[str, str]) -> dict:
    """Every JSON and JSON-lines file under ``out``, by relative path, normalised."""
    found = {}
    for path in sorted(out.rglob("*")):
        if path.suffix == ".json":
            found[str(path.relative_to(out))] = normalised(json.loads(path.read_text()), roots)
        elif path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            found[str(path.relative_to(out))] = normalised(rows, roots)
    return found


def differences(got, want, where: str = "", *, exact: bool) -> list[str]:
    """Where ``got`` differs from ``want``: to the bit when ``exact``, else within the tolerances."""
    if isinstance(want, dict) and isinstance(got, dict):
        if not exact and where.rsplit("/", 1)[-1] == "analysis":
            want = {k: v for k, v in want.items() if k not in ANALYSIS_DERIVED}
            got = {k: v for k, v in got.items() if k not in ANALYSIS_DERIVED}
        if missing := set(want) - set(got):  # keys added since the recording are not compared
            return [f"{where}: keys {sorted(missing)} are missing"]
        return [d for k in want for d in differences(got[k], want[k], f"{where}/{k}", exact=exact)]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items, recorded {len(want)}"]
        pairs = enumerate(zip(got, want, strict=True))
        return [d for i, (g, w) in pairs for d in differences(g, w, f"{where}[{i}]", exact=exact)]
    if isinstance(want, float) and isinstance(got, float) and not exact:
        if math.isnan(want) and math.isnan(got):
            return []
        tol = ACC_ATOL if "acc" in where.rsplit("/", 1)[-1] else ATOL + RTOL * abs(want)
        if abs(got - want) <= tol:
            return []
        return [f"{where}: {got!r}, recorded {want!r} (tolerance {tol:.2g})"]
    return [] if got == want and type(got) is type(want) else [f"{where}: {got!r}, recorded {want!r}"]


def check(name: str, found: dict) -> None:
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        path.write_text(json.dumps({"fingerprint": fingerprint(), "outputs": found}, indent=1) + "\n")
        return
    recorded = json.loads(path.read_text())
    exact = recorded["fingerprint"] == fingerprint()
    diffs = differences(found, normalised(recorded["outputs"], {}), exact=exact)
    mode = "bitwise (same machine)" if exact else f"within tolerances (recorded on {recorded['fingerprint']})"
    assert not diffs, f"{name}: {len(diffs)} differences, compared {mode}:\n" + "\n".join(diffs[:20])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache holding the committed one-epoch digits checkpoint under its (config, seed) name; no
    pretraining may happen."""
    folder = tmp_path / "cache"
    folder.mkdir()
    config = digits.DigitsConfig(**TINY)
    shutil.copy(GOLDEN / "digits_vit_tiny.safetensors", folder / f"digits_vit-{config.key(0)}.safetensors")

    def no_pretraining(*args, **kwargs):
        raise AssertionError("the committed checkpoint must be used")

    monkeypatch.setattr(digits, "pretrain", no_pretraining)
    return folder


@pytest.mark.slow
def test_golden_measure_finetune_and_claim(tmp_path, cache, capsys):
    roots = {str(tmp_path): "<TMP>"}
    demo = tmp_path / "demo"
    assert cli_main(["measure", "--cache-dir", str(cache), "--pretrain-config", json.dumps(TINY),
                     "--batches", "1", "--batch-size", "16", "--no-progress", "--out", str(demo)]) == 0
    check("measure_demo", digest(demo, roots))

    one = tmp_path / "one"
    assert cli_main(["finetune", *TRAINING, "--train", "MHA@0", "--lr", "1e-2", "--out", str(one)]) == 0
    check("finetune_one", digest(one, roots))

    grid = tmp_path / "grid"
    assert cli_main(["finetune", *TRAINING, "--train", "MHA,FC1@-1+LN1,head", "--lr", "3e-3,1e-2",
                     "--no-plots", "--out", str(grid)]) == 0
    check("finetune_grid", digest(grid, roots))
    capsys.readouterr()

    whole = tmp_path / "claim"
    claim(out=str(whole), **CLAIM)
    claim_digest = digest(whole, {str(whole): "<OUT>", **roots})
    check("claim", claim_digest)

    sharded = tmp_path / "sharded"
    for shard in ("1/2", "2/2"):
        claim(out=str(sharded), shard=shard, **CLAIM)
    claim(out=str(sharded), analyse_only=True, **CLAIM)
    sharded_digest = digest(sharded, {str(sharded): "<OUT>", **roots})
    check("claim_two_shards", sharded_digest)
    assert sharded_digest["claim.json"]["analysis"] == claim_digest["claim.json"]["analysis"]


def test_the_comparison_can_fail():
    recorded = {"a.json": {"loss": 1.0, "final_acc": 0.5, "analysis": {"verdict": "x", "rows": [1]}}}
    same = json.loads(json.dumps(recorded))
    assert not differences(same, recorded, exact=True)
    drift = {"a.json": {"loss": 1.0 + 1e-7, "final_acc": 0.5 + 1 / 64, "analysis": {"verdict": "y",
                                                                                       "rows": [1]}}}
    assert len(differences(drift, recorded, exact=True)) == 3
    assert not differences(drift, recorded, exact=False)  # rounding drift and a flipped verdict
    moved = {"a.json": {"loss": 1.01, "final_acc": 0.6, "analysis": {"verdict": "x", "rows": [2]}}}
    assert len(differences(moved, recorded, exact=False)) == 3
    assert differences({"a.json": {"loss": 1.0}}, recorded, exact=True) == [
        "/a.json: keys ['analysis', 'final_acc'] are missing"]
    assert not differences({"a.json": {**same["a.json"], "new_option": 1}}, recorded, exact=True)
