"""`vitplast claim` as one experiment over a grid, on the embedded digits ViT: every existing run checked
against the options before anything trains (the dry run names each mismatch), ``--shard I/N`` slices
plus an ``--analyse-only`` pass give the unsharded result, a run directory another process holds is
waited for, and several datasets with the baselines full and lora give each dataset's claim and the
aggregate over them."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import collecting, quiet
from vitplast.claim import claim
from vitplast.cli import main as cli_main

SMALL = dict(components="MHA,FC1,LN1", optimizer="sgd", lr="3e-3", seed="0,1", steps=6, checkpoint_every=3,
             jobs=1,
             bootstrap=100, criteria="plasticity,size", progress=False, reporter=quiet())


def _tree(root):
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _metrics(out):
    return {p.parent.name: p.read_text() for p in sorted((out / "runs").glob("*/metrics.jsonl"))}


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid") / "whole"
    return out, claim(out=str(out), **SMALL)


@pytest.mark.slow
def test_the_dry_run_names_every_run_of_other_options(whole, tmp_path):
    out, _ = whole
    before = _tree(out)
    with pytest.raises(ValueError) as exc:
        claim(out=str(out), **{**SMALL, "steps": 7}, dry_run=True)
    text = str(exc.value)
    assert ("10 existing run(s) were trained with options that differ: steps: saved 6, now 7 in 10 run(s)"
            in text)  # 8 of the components and head, 2 of full finetuning (the budgets' reference)
    for name in ("MHA-lr0.003-s0", "FC1-lr0.003-s1", "LN1-lr0.003-s0", "head-lr0.003-s1"):
        assert f"runs/{name}" in text
    with pytest.raises(ValueError, match="checkpoint_every: saved 3, now 2"):
        claim(out=str(out), **{**SMALL, "checkpoint_every": 2})  # the real run: refused before training
    assert _tree(out) == before  # nothing written, nothing trained


@pytest.mark.slow
def test_two_shards_and_an_analysis_pass_give_the_whole_result(whole, tmp_path, monkeypatch):
    out, ref = whole
    sharded = tmp_path / "sharded"
    said = []
    first = claim(out=str(sharded), **{**SMALL, "reporter": collecting(said)}, shard="1/2")
    assert first.plan["shard"] == {"shard": "1/2", "runs": 5, "finished": 0, "partial": 0, "new": 5}
    assert not (sharded / "claim.json").exists() and not (sharded / "plasticity_chunks.json").exists()
    assert any("without --shard" in s for s in said)
    with pytest.raises(ValueError, match="--analyse-only: 5 of 10 runs are not finished"):
        claim(out=str(sharded), **SMALL, analyse_only=True)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")  # the second task of a 0-based array of two
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    second = claim(out=str(sharded), **SMALL)
    assert second.plan["shard"]["shard"] == "2/2" and len(second.runs) == 5
    assert {(r["train"], r["seed"]) for r in first.runs}.isdisjoint((r["train"], r["seed"])
                                                                    for r in second.runs)
    final = claim(out=str(sharded), **SMALL, analyse_only=True)  # the array's variables do not shard it
    assert final.plan["trained"] == 0 and final.plan["reused"] == 10
    assert final.analysis == ref.analysis
    assert _metrics(sharded) == _metrics(out)
    assert json.loads((sharded / "claim.json").read_text())["analysis"] == ref.analysis.to_json()


def _holder(run_dir, seconds: float) -> subprocess.Popen:
    """Another process holding ``run_dir``'s lock for ``seconds``, then dying without releasing it."""
    code = ("import sys, time, os; from vitplast.runs.lock import RunLock; RunLock(sys.argv[1]).acquire(); "
            "print('locked', flush=True); time.sleep(float(sys.argv[2])); os._exit(0)")
    run_dir.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir), str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.slow
def test_a_run_another_process_holds_is_waited_for(whole, tmp_path):
    out, ref = whole
    held = tmp_path / "held" / "runs" / "MHA-lr0.003-s0"
    proc = _holder(held, 4.0)
    said, t0 = [], time.monotonic()
    try:
        res = claim(out=str(tmp_path / "held"), **{**SMALL, "reporter": collecting(said)})
    finally:
        proc.wait(timeout=30)
    assert time.monotonic() - t0 >= 4.0
    waits = [s for s in said if "is held by process" in s]
    assert len(waits) == 1 and f"process {proc.pid}" in waits[0] and "MHA lr=0.003 seed=0" in waits[0]
    assert res.plan["trained"] == 10 and res.analysis == ref.analysis


@pytest.mark.slow
def test_several_datasets_with_the_baselines_and_their_aggregate(tmp_path):
    out = tmp_path / "paper"
    kw = {**SMALL, "components": "MHA,FC1,LN1,full,lora", "lr": "3e-2", "seed": "0", "steps": 8,
          "permutations": 200}
    res = claim(out=str(out), data=["digits:5-9"], datasets="digits:3-7", **kw)
    assert set(res.datasets) == {"digits_5-9", "digits_3-7"}
    # 6 trains and LoRA at the budget's rank per dataset
    assert res.plan["runs"] == 2 * 7 and res.plan["datasets"] == ["digits:5-9", "digits:3-7"]
    for name, spec in (("digits_5-9", "digits:5-9"), ("digits_3-7", "digits:3-7")):
        one = out / "datasets" / name
        saved = json.loads((one / "claim.json").read_text())
        assert saved["config"]["data"] == spec
        assert [r["component"] for r in saved["analysis"]["rows"]] == ["MHA", "FC1", "LN1"]
        assert [b["train"] for b in saved["analysis"]["baselines"]] == ["full", "lora"]
        lora = next(r for r in saved["analysis"]["budgets"]["rows"] if r["criterion"] == "lora")
        assert sorted(p.name for p in (one / "runs").iterdir()) == sorted(
            f"{t}-lr0.03-s0" for t in ("MHA", "FC1", "LN1", "full", "lora", "head",
                                       lora["train"].replace(":", "_").replace("=", "_")))
        # LoRA's rank: its parameters besides the head nearest the median component's (budget 1's random
        # sets are the single components), within half of what one unit of rank adds: 4 layers of
        # attention, each qkv (64 -> 192) and proj (64 -> 64): 4 (64 + 192 + 64 + 64) = 1536
        params = {r["train"]: r["trainable_params"] for r in saved["runs"]}
        median = sorted(params[c] - params["head"] for c in ("MHA", "FC1", "LN1"))[1]
        rank = int(lora["train"].removeprefix("lora:r="))
        assert "1,536 per unit of rank" in saved["analysis"]["budgets"]["lora"]
        assert lora["trainable_params"] - params["head"] == 1536 * rank and abs(1536 * rank - median) <= 768
        text = (one / "claim.txt").read_text()
        assert "full       (baseline, not ranked)" in text and "lora" in text
        assert (one / "claim.png").exists() and (one / "plasticity_chunks.json").exists()
    agg = json.loads((out / "aggregate.json").read_text())["aggregate"]
    assert set(agg["datasets"]) == {"digits_5-9", "digits_3-7"}
    assert agg["pooled"]["strata"] == 2 and -1 <= agg["pooled"]["spearman"] <= 1
    assert 0 < agg["pooled"]["p_greater"] <= 1 and agg["combined"]["method"] == "stouffer"
    text = (out / "aggregate.txt").read_text()
    assert "pooled within datasets" in text and "verdict:" in text
    assert (out / "aggregate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = claim(out=str(out), data=["digits:5-9"], datasets="digits:3-7", **kw)
    assert again.plan["reused"] == 14 and again.aggregate == res.aggregate


@pytest.mark.slow
def test_the_arms_of_one_dataset_measure_it_once(tmp_path):
    """SGD and AdamW on one dataset: the second arm reuses the first arm's plasticity chunks and criteria
    files (copied into its folder, read back with the checks of any saved file, its cache key included)
    instead of measuring the same model on the same images again."""
    out, said = tmp_path / "arms", []
    kw = {**SMALL, "optimizer": "sgd,adamw", "seed": "0", "steps": 2, "criteria": "plasticity,size,rgn",
          "reporter": collecting(said)}
    res = claim(out=str(out), **kw)
    adamw = out / "datasets" / "digits_5-9-adamw"
    copied = [s for s in said if "copied from" in s]
    assert len(copied) == 1 and "plasticity_chunks.json, criteria/rgn.json, criteria/size.json" in copied[0]
    assert any(s.startswith("plasticity [digits_5-9-adamw]: loaded from") for s in said)
    assert not any("matched pairs" in s and "adamw" in s for s in said)  # measured once, by the first arm
    reused = {r["path"] for r in res.datasets["digits_5-9-adamw"].measurement["reused_files"]}
    assert reused == {str(adamw / "plasticity_chunks.json"), str(adamw / "criteria" / "rgn.json"),
                      str(adamw / "criteria" / "size.json")}
    first, second = (res.datasets[f"digits_5-9-{o}"].analysis for o in ("sgd", "adamw"))
    assert [r.plasticity for r in first.rows] == [r.plasticity for r in second.rows]
    assert [(c.criterion, c.n) for c in first.criteria] == [(c.criterion, c.n) for c in second.criteria]


@pytest.mark.parametrize("args, message", [
    (["--components", "MHA,FC1,full"], "at least 3 components besides the baselines"),
    (["--components", "MHA,FC1,LN1,full", "--granularity", "layer"], "baselines full, lora and head apply"),
    (["--data", "digits:5-9", "--datasets", "digits:5-9"], "digits:5-9 given twice"),
    (["--shard", "3/2"], "--shard: expected I/N with 1 <= I <= N"),
    (["--shard", "1/2", "--analyse-only"], "--analyse-only analyses the whole grid"),
    (["--jobs", "2", "--executor", "ray"], "--jobs applies to --executor local"),
    (["--ray-address", "auto"], "--ray-address only applies to --executor ray"),
])
def test_grid_options_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys):
    rc = cli_main(["claim", "--out", str(tmp_path / "o"), "--no-progress", *args])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()


def test_baselines_beside_the_components_get_accuracy_and_gain_not_rank():
    import numpy as np
    from vitplast.claim.analysis import analyse
    from vitplast.claim.units import ClaimUnits

    stats = np.zeros((2, 3, 1, 5))
    for c, p in enumerate((3.0, 2.0, 1.0)):
        stats[:, c, 0] = [4, 4 * p, 4 * p * p, 0, 0]
    measured = {"components": ["MHA", "FC1", "LN1"], "layers": ["0"], "stats": stats.tolist(), "pairs": 8,
                "chunks": 2}
    acc = {"MHA": [0.8, 0.9], "FC1": [0.7, 0.7], "LN1": [0.5, 0.6], "full": [0.95, 0.85], "head": [0.5, 0.6]}
    summaries = [{"train": t, "lr": 1e-3, "seed": s, "final_acc": a[s], "initial_acc": 0.2,
                  "trainable_params": {"full": 1000}.get(t, 10)} for t, a in acc.items() for s in (0, 1)]
    an = analyse(measured, summaries, units=ClaimUnits.whole(["MHA", "FC1", "LN1"]), extra=["full"],
                 lrs=[1e-3],
                 seeds=[0, 1], bootstrap=50).to_json()
    (full,) = an["baselines"]
    assert full["train"] == "full" and full["trainable_params"] == 1000
    assert full["best_lr_gain_per_seed"] == pytest.approx([0.45, 0.25])
    assert full["accuracy"]["mean"] == pytest.approx(0.9)
    assert [r["component"] for r in an["rows"]] == ["MHA", "FC1", "LN1"]  # full is not ranked
    assert an["ranking"]["best_lr_gain"] == ["MHA", "FC1", "LN1"]


def test_the_default_claim_has_two_arms_and_lora_beside_the_components(tmp_path, monkeypatch):
    """No flags: momentum SGD and AdamW are two arms, each with its own --lr auto grid and folder; lora
    joins the components where peft is installed (and not at --granularity layer, nor without peft)."""
    from vitplast.claim.datasets import dataset_plans
    from vitplast.claim.experiment import claim_options

    pytest.importorskip("peft")
    opts = claim_options(out=str(tmp_path / "c"))
    assert opts.optimizer == ["sgd", "adamw"]
    assert opts.components == ["MHA", "FC1", "FC2", "LN1", "LN2", "lora"]
    arms = dataset_plans(opts, progress=False)
    assert [(a.name, a.optimizer, a.lrs) for a in arms] == [
        ("digits_5-9-sgd", "sgd", (1e-2, 3e-2, 1e-1)), ("digits_5-9-adamw", "adamw", (1e-3, 3e-3, 1e-2))]
    assert [a.out for a in arms] == [tmp_path / "c" / "datasets" / a.name for a in arms]
    assert all(a.settings.optimizer == a.optimizer for a in arms)
    one = dataset_plans(claim_options(out=str(tmp_path / "d"), optimizer="adamw", lr="1e-3,1e-2"),
                        progress=False)
    assert [(a.name, a.out, a.lrs) for a in one] == [("digits_5-9", tmp_path / "d", (1e-3, 1e-2))]
    assert "lora" not in claim_options(out=str(tmp_path / "e"), granularity="layer").components
    monkeypatch.setitem(sys.modules, "peft", None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "peft" else object())
    assert claim_options(out=str(tmp_path / "f")).components == ["MHA", "FC1", "FC2", "LN1", "LN2"]
