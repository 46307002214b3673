"""`vitplast claim`: its statistics against hand-computed cases, the analysis on a made-up grid, and
end to end on a tiny timm ViT: reports, reuse of finished runs, resume after a kill, dry run, errors."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
import torch
from helpers import Killed, collecting, kill_after, quiet
from vitplast.claim import claim
from vitplast.claim.analysis import analyse as typed_analysis
from vitplast.claim.result import UNIT_COLUMNS, ClaimResult
from vitplast.claim.units import ClaimUnits
from vitplast.cli import main as cli_main
from vitplast.outputs.result_files import ResultFileError


def analyse(*args, **kwargs) -> dict:
    """The analysis as claim.json holds it."""
    return typed_analysis(*args, **kwargs).to_json()


# ------------------------------------------------------------------------------------------ analysis
def _made_up(plasticity=(3.0, 2.0, 1.0), chunks=2, seeds=2):
    """Measured chunks with plasticity MHA 3, FC1 2, LN1 1 (one layer), and a 2-lr grid over ``seeds``
    seeds (seed s has the accuracies of seed s % 2 below)."""
    stats = np.zeros((chunks, 3, 1, 5))
    for c, p in enumerate(plasticity):
        stats[:, c, 0] = [4, 4 * p, 4 * p * p, 0, 0]
    measured = {"components": ["MHA", "FC1", "LN1"], "layers": ["0"], "stats": stats.tolist(),
                "pairs": 4 * chunks, "chunks": chunks}
    acc = {  # train -> {lr: [seed 0, seed 1]}
        "MHA": {1e-3: [0.8, 0.9], 1e-2: [0.9, 1.0]},
        "FC1": {1e-3: [0.7, 0.7], 1e-2: [0.6, 0.6]},
        "LN1": {1e-3: [0.5, 0.65], 1e-2: [0.1, 0.1]},
        "head": {1e-3: [0.5, 0.6], 1e-2: [0.4, 0.4]},
    }
    summaries = [{"train": t, "lr": lr, "seed": s, "final_acc": a[s % 2], "initial_acc": [0.2, 0.3][s % 2],
                  "trainable_params": {"MHA": 100, "FC1": 80, "LN1": 8, "head": 5}[t]}
                 for t, by_lr in acc.items() for lr, a in by_lr.items() for s in range(seeds)]
    return measured, summaries


def test_analysis_gains_best_lr_and_correlations_by_hand():
    measured, summaries = _made_up()
    an = analyse(measured, summaries, units=ClaimUnits.whole(["MHA", "FC1", "LN1"]),
                 lrs=[1e-3, 1e-2], seeds=[0, 1],
                 bootstrap=300)
    rows = {r["component"]: r for r in an["rows"]}
    assert rows["MHA"]["lr"] == 1e-2 and rows["FC1"]["lr"] == 1e-3 and an["baseline"]["lr"] == 1e-3
    # paired per-seed gains over the head's best lr (seeds: 0.5, 0.6)
    assert rows["MHA"]["best_lr_gain_per_seed"] == pytest.approx([0.4, 0.4])
    assert rows["FC1"]["best_lr_gain_per_seed"] == pytest.approx([0.2, 0.1])
    assert rows["LN1"]["best_lr_gain_per_seed"] == pytest.approx([0.0, 0.05])
    assert rows["MHA"]["best_lr_gain"]["ci"] == pytest.approx([0.4, 0.4])
    half = 12.706204736 * 0.05  # t(1) * sem of [0.2, 0.1]
    assert rows["FC1"]["best_lr_gain"]["ci"] == pytest.approx([0.15 - half, 0.15 + half])
    assert rows["FC1"]["accuracy"]["ci"] == pytest.approx([0.7, 0.7])
    assert rows["LN1"]["accuracy"]["ci"][1] == 1.0  # cut to what an accuracy can be
    assert rows["MHA"]["plasticity"] == pytest.approx(3.0)
    assert rows["MHA"]["plasticity_ci"] == [None, None]  # 2 chunks: no bootstrap interval
    assert rows["MHA"]["trainable_params"] == 100
    sp, kd = an["correlations"]["spearman"], an["correlations"]["kendall"]
    assert sp["value"] == pytest.approx(1.0) and kd["value"] == pytest.approx(1.0)
    assert sp["p_greater"] == pytest.approx(1 / 6) and sp["p_two_sided"] == pytest.approx(1 / 3)
    # 2 seeds and 2 chunks are too few to resample: no interval, and the report says why
    assert sp["ci"] == [None, None] and kd["ci"] == [None, None]
    assert "2 seeds and 2 pair chunks" in an["bootstrap"]["withheld"]
    # the paper's relative gain: best mean accuracy over lrs, against the head-only run's
    assert rows["MHA"]["relative_gain"] == pytest.approx((0.95 - 0.55) / 0.55)
    assert rows["LN1"]["relative_gain"] == pytest.approx((0.575 - 0.55) / 0.55)
    assert rows["MHA"]["relative_gain_validated"] is None  # the runs hold no held-out accuracy
    assert rows["FC1"]["best_lr_gain"]["n"] == 2 and rows["LN1"]["accuracy"]["clipped"] == "both"
    mha = an["mha_tests"]["comparisons"]
    assert set(mha) == {"FC1", "LN1"} and mha["FC1"]["n"] == 2
    assert mha["FC1"]["mean_difference"] == pytest.approx(0.25)
    assert an["ranking"]["best_lr_gain"] == ["MHA", "FC1", "LN1"]
    # every best lr sits at an edge of this 2-lr grid: no verdict, and the units at an edge named
    assert an["verdict"].startswith("not bracketed") and "rho = +1.00" in an["verdict"]
    assert all(f"{u} ({e})" in an["verdict"] for u, e in (("MHA", "high"), ("FC1", "low"), ("LN1", "low")))
    # bracketed, the same correlation is read as far as 3 units' permutation test allows
    from vitplast.claim.analysis import verdict

    spearman = typed_analysis(measured, summaries, units=ClaimUnits.whole(["MHA", "FC1", "LN1"]),
                              lrs=[1e-3, 1e-2], seeds=[0, 1], bootstrap=300
                              ).correlations.spearman
    assert verdict(spearman, 3).startswith("not established") and "0.167" in verdict(spearman, 3)
    assert "no bootstrap interval" in verdict(spearman, 3)
    # sizes 100 > 80 > 8 rank like the gains: the rival predictor is reported beside plasticity
    assert an["params_correlations"]["spearman"]["value"] == pytest.approx(1.0)
    assert an["params_correlations"]["kendall"]["p_greater"] == pytest.approx(1 / 6)


def test_analysis_initial_baseline_and_reversed_plasticity():
    measured, summaries = _made_up(plasticity=(1.0, 2.0, 3.0))
    summaries = [s for s in summaries if s["train"] != "head"]
    an = analyse(measured, summaries, units=ClaimUnits.whole(["MHA", "FC1", "LN1"]),
                 lrs=[1e-3, 1e-2], seeds=[0, 1],
                 baseline="initial", bootstrap=300)
    rows = {r["component"]: r for r in an["rows"]}
    assert rows["MHA"]["best_lr_gain_per_seed"] == pytest.approx([0.7, 0.7])  # best lr minus (0.2, 0.3)
    assert rows["LN1"]["best_lr_gain_per_seed"] == pytest.approx([0.3, 0.35])
    assert an["correlations"]["spearman"]["value"] == pytest.approx(-1.0)
    assert an["correlations"]["spearman"]["p_greater"] == pytest.approx(1.0)
    assert an["trend"]["slope"] < 0


def test_analysis_bootstrap_moves_with_noisy_seeds():
    # FC1 and LN1 swap order between seeds: the bootstrap interval must widen below 1
    measured, summaries = _made_up(chunks=5, seeds=5)
    for s in summaries:
        if s["train"] == "LN1" and s["lr"] == 1e-3:
            s["final_acc"] = [0.5, 0.95][s["seed"] % 2]
    an = analyse(measured, summaries, units=ClaimUnits.whole(["MHA", "FC1", "LN1"]),
                 lrs=[1e-3, 1e-2],
                 seeds=list(range(5)), bootstrap=400)
    lo, hi = an["correlations"]["spearman"]["ci"]
    assert lo < 1.0 and hi == pytest.approx(1.0)
    assert an["bootstrap"]["withheld"] is None
    rows = {r["component"]: r for r in an["rows"]}
    assert rows["MHA"]["plasticity_ci"] == pytest.approx([3.0, 3.0])  # equal chunks: a point


def test_report_labels_its_intervals():
    from vitplast.claim.records import Correlation
    from vitplast.claim.report import _ci, disagreement_lines, t_ci

    assert _ci([None, None], ".2f") == "[no interval]"
    assert _ci([0.5, 0.5], ".2f") == "[0.50: no spread]"
    assert t_ci({"ci": [0.1, 0.3], "n": 3, "clipped": None}, ".2f") == "[0.10, 0.30] t n=3"
    assert t_ci({"ci": [0.0, 0.3], "n": 3, "clipped": "low"}, ".2f").endswith("clipped at its lower bound")
    assert t_ci({"ci": [None, None], "n": 1}, ".2f") == "(n=1: no interval)"
    assert t_ci({"ci": [0.2, 0.2], "n": 2}, ".2f").startswith("[0.20: no spread]")
    # an interval excluding 0 beside p >= 0.05: the report says what each answers
    assert "different questions" in disagreement_lines(Correlation(0.5, [0.5, 0.6], 0.175))[0]
    assert disagreement_lines(Correlation(0.5, [-0.2, 0.6], 0.175)) == []


# ------------------------------------------------------------------------------------------ end to end
TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, threads=1, jobs=1, progress=False,
            model_kwargs=dict(patch_size=8, depth=2, embed_dim=32, num_heads=2),
            pretrain_data="synthetic", data="synthetic", components="MHA,FC1,LN1", lr="3e-3", optimizer="sgd",
            seed="0,1", steps=4, batch_size=16, checkpoint_every=2, pairs=24, pair_batch=4,
            bootstrap=200, criteria="plasticity,size,spectral", reporter=quiet())  # loss-based criteria:
# test_claim_criteria.py (they cost seconds per claim)


def _claim(out, **kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no weights given.*")
        return claim(out=str(out), **{**TINY, **kw})


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("claim") / "whole"
    return out, _claim(out)


def _strict_json(path):
    def no_constant(name):
        raise ValueError(f"{path} holds {name}: not strict JSON")

    return json.loads(path.read_text(), parse_constant=no_constant)


def test_claim_end_to_end_writes_reports(whole):
    out, res = whole
    # the 8 runs of the components and head, and full finetuning as the budgets' reference line (default
    # --budgets 1: the single components' own runs)
    assert res.plan["runs"] == 10 and res.plan["trained"] == 10 and res.plan["reused"] == 0
    assert res.plan["budget_runs"] == 2 and res.plan["budget_trains"] == ["full"]
    saved = _strict_json(out / "claim.json")
    record = saved["measurement"]["provenance"]  # versions, the weights and the images' preparation
    assert record["versions"]["torch"] and record["data"]["data"] and record["transform"]
    assert [r["component"] for r in saved["analysis"]["rows"]] == ["MHA", "FC1", "LN1"]
    for r in saved["analysis"]["rows"]:
        assert r["plasticity"] > 0 and r["plasticity_ci"][0] <= r["plasticity"] <= r["plasticity_ci"][1]
        assert len(r["plasticity_per_layer"]) == 2 and r["trainable_params"] > 0
        assert len(r["best_lr_gain_per_seed"]) == 2
    assert set(saved["analysis"]["other_measured"]) == {"LN2", "FC2"}  # measured, not finetuned
    assert -1 <= saved["analysis"]["correlations"]["spearman"]["value"] <= 1
    assert saved["analysis"]["correlations"]["kendall"]["permutations"] == 6
    text = (out / "claim.txt").read_text()
    assert "Spearman rho" in text and "Kendall tau-b" in text and "verdict:" in text
    assert "plasticity-only" in text
    assert (out / "claim.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == sorted(f"{t}-lr0.003-s{s}" for t in ("MHA", "FC1", "LN1", "head", "full") for s in (0, 1))
    for name in runs:
        files = {p.name for p in (out / "runs" / name).iterdir()}
        assert {"config.json", "metrics.jsonl", "summary.json"} <= files


def test_the_result_is_typed_and_reads_back_from_claim_json(whole, tmp_path):
    out, res = whole
    assert isinstance(res, ClaimResult) and res.text == (out / "claim.txt").read_text().rstrip("\n")
    assert ClaimResult.read(out / "claim.json") == dataclasses.replace(res, text=None)
    frame = res.to_dataframe()
    assert list(frame.columns) == ["arm", *UNIT_COLUMNS] and list(frame["unit"]) == ["MHA", "FC1", "LN1"]
    assert list(frame["plasticity"]) == [r.plasticity for r in res.analysis.rows]
    edited = json.loads((out / "claim.json").read_text())
    edited["analysis"]["rows"][0]["plasticity"] = "high"
    (tmp_path / "claim.json").write_text(json.dumps(edited))
    with pytest.raises(ResultFileError, match="checksum"):
        ClaimResult.read(tmp_path / "claim.json")


def test_default_holds_out_training_images_and_reports_the_validated_relative_gain(whole, tmp_path):
    out, res = whole
    for run in (out / "runs").iterdir():  # default --holdout 0.1
        assert json.loads((run / "config.json").read_text())["holdout"] == 0.1
        assert 0 <= json.loads((run / "summary.json").read_text())["holdout_acc"] <= 1
    rows = res.analysis.rows
    assert all(r.relative_gain_validated is not None for r in rows)
    # one lr: the validation split chooses the lr the test accuracy chose, so both gains agree
    assert [r.relative_gain_validated for r in rows] == [r.relative_gain for r in rows]
    assert "not available" not in res.analysis.relative_gain.validated
    text = (out / "claim.txt").read_text()
    assert "relative_gain (the paper's, lr chosen on the test accuracy)" in text
    assert "relative_gain, lr chosen on held-out validation data" in text and "not available" not in text
    with pytest.raises(ValueError, match=r"--holdout 0\.001: holds out 0 of the"):
        _claim(tmp_path / "h", holdout=0.001)  # synthetic: 320 training images
    assert not (tmp_path / "h").exists()


def test_rerun_reuses_every_run_and_other_options_are_refused(whole):
    out, res = whole
    again = _claim(out)
    assert again.plan["trained"] == 0 and again.plan["reused"] == 10
    assert again.analysis == res.analysis
    with pytest.raises(ValueError, match="differ"):
        _claim(out, steps=5)  # the finetune driver refuses a run directory of other options
    with pytest.raises(ValueError, match="other options"):
        _claim(out, pairs=28)  # the saved plasticity was measured with other options


def test_killed_claim_resumes_to_the_same_result(whole, tmp_path):
    out, res = whole
    with pytest.raises(Killed):
        # first run killed after step 3, checkpoint at step 2
        _claim(tmp_path / "k", after_step=kill_after(3))
    first = tmp_path / "k" / "runs" / "MHA-lr0.003-s0"
    assert (first / "config.json").exists() and not (first / "summary.json").exists()
    assert torch.load(first / "checkpoint.pt", weights_only=True)["step"] == 2
    resumed = _claim(tmp_path / "k")
    assert resumed.plan["trained"] == 10
    assert [r["final_acc"] for r in resumed.runs] == [r["final_acc"] for r in res.runs]
    assert resumed.analysis.correlations == res.analysis.correlations


def test_dry_run_plans_and_estimates_without_training(whole, tmp_path, capsys):
    out, _ = whole
    said = []
    res = _claim(tmp_path / "d", dry_run=True, reporter=collecting(said))
    assert res.plan["runs"] == 10 and res.plan["new"] == 10  # full finetuning: the budgets' reference
    est = res.estimate
    assert est["overhead_s"] > 0 and est["remaining_seconds"] > 0
    assert set(est["step_s"]) == {"MHA", "FC1", "LN1", "head"}
    assert not (tmp_path / "d").exists()  # nothing trained, nothing written
    assert any("10 finetuning runs" in s for s in said) and any("about" in s for s in said)
    done = _claim(out, dry_run=True)
    assert done.plan["finished"] == 10 and done.estimate["remaining_seconds"] == 0
    with pytest.raises(ValueError, match="time-budget"):
        _claim(tmp_path / "b", time_budget=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--components", "MHA,XYZ"], "--components: unknown"),
    (["--components", "MHA,FC1"], "at least 3 components"),
    (["--lr", "1e-3,-1"], "--lr: must be a positive number"),
    (["--lr", "fast"], "--lr: expected a number, got 'fast'"),
    (["--seed", "0,0"], "repeated value"),
    (["--pairs", "4", "--pair-batch", "8"], "--pairs (4) must be at least --pair-batch (8)"),
    (["--steps", "0"], "--steps: must be an integer in 1.."),
    (["--steps", "many"], "--steps: expected an integer"),
    (["--protocol", "paper"], "--protocol: must be one of in_situ, decomposition"),
    (["--device", "tpu:0"], "--device"),
    (["--model-arg", "depth=2"], "does not apply to digits-vit"),
    (["--time-budget", "-1"], "--time-budget: must be a positive number"),
    (["--model", "vit_tiny_patch16_224", "--random-init", "--data", "/no/such/dir"], "unknown dataset spec"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys):
    try:
        rc = cli_main(["claim", "--out", str(tmp_path / "o"), "--no-progress", *args])
    except SystemExit as exc:  # argparse's own checks
        rc = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("vitplast claim: error: ") and message in lines[0], lines[0]
    assert not (tmp_path / "o" / "runs").exists()


def test_cli_needs_out(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["claim"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(err) == 1 and "--out" in err[0]
