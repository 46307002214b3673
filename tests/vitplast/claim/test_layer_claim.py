"""`vitplast claim --granularity layer`: the analysis on a made-up grid with hand-countable p-values,
and end to end on a tiny timm ViT (reports, the selection at equal budget, resume after a kill, errors)."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
from helpers import Killed, collecting, kill_after, quiet
from vitplast.claim import claim
from vitplast.claim.analysis import analyse as typed_analysis
from vitplast.claim.lr_auto import LR_AUTO_STEPS, lrs_run, widen, widen_groups
from vitplast.claim.samples import accuracy_cube, lr_edge
from vitplast.claim.units import ClaimUnits, units_of
from vitplast.cli import main as cli_main


def analyse(*args, **kwargs) -> dict:
    """The analysis as claim.json holds it."""
    return typed_analysis(*args, **kwargs).to_json()


def _made_up():
    """MHA and LN1 over 3 layers; plasticity rises with the layer; gains rise with it inside each
    type, LN1's gains all above MHA's (so the across-type order is not the plasticity order)."""
    comps, layers, chunks = ["LN1", "MHA"], ["0", "1", "2"], 2
    plast = {"LN1": [0.2, 0.4, 0.6], "MHA": [0.5, 1.0, 1.5]}
    stats = np.zeros((chunks, 2, 3, 5))
    for ci, c in enumerate(comps):
        for li, p in enumerate(plast[c]):
            stats[:, ci, li] = [4, 4 * p, 4 * p * p, 0, 0]
    measured = {"components": comps, "layers": layers, "stats": stats.tolist(), "pairs": 8, "chunks": chunks}
    gain = {"MHA@0": 0.01, "MHA@1": 0.02, "MHA@2": 0.03, "LN1@0": 0.10, "LN1@1": 0.11, "LN1@2": 0.12}
    params = {"MHA": 100, "LN1": 8}
    summaries = []
    for t, g in list(gain.items()) + [("head", 0.0)]:
        for s in (0, 1):
            for lr in (1e-3, 1e-2):
                summaries.append({"train": t, "lr": lr, "seed": s, "final_acc": 0.5 + g + (0.01 if lr == 1e-2
                                                                                            else 0.0),
                                  "initial_acc": 0.2, "trainable_params": params.get(t[:3], 5) + 5})
    return measured, summaries


def test_component_and_layer_claims_share_one_schema():
    import dataclasses

    from vitplast.claim.records import ClaimAnalysis, UnitRow
    from vitplast.outputs.result_files import ResultFileError

    measured, summaries = _made_up()
    whole = [{**s, "train": c} for c in ("MHA", "LN1") for s in summaries if s["train"] == f"{c}@0"]
    common = dict(lrs=[1e-3, 1e-2], seeds=[0, 1], bootstrap=50, permutations=50)
    units = ClaimUnits.per_layer(units_of(measured, ["MHA", "LN1"]))
    layer = typed_analysis(measured, summaries, units=units, **common)
    component = typed_analysis(measured, whole + [s for s in summaries if s["train"] == "head"],
                               units=ClaimUnits.whole(["MHA", "LN1"]), **common)
    lj, cj = layer.to_json(), component.to_json()
    row_keys = {f.name for f in dataclasses.fields(UnitRow)}
    assert set(lj) == set(cj) and set(lj["rows"][0]) == set(cj["rows"][0]) == row_keys
    assert set(lj["params_correlations"]["spearman"]) == set(cj["params_correlations"]["spearman"])
    assert (lj["granularity"], cj["granularity"]) == ("layer", "component")
    assert cj["within_type"] is None and lj["within_type"] is not None  # one unit per type: nothing within
    assert cj["rows"][0]["layer"] is None and lj["rows"][0]["layer"] == "0"
    assert ClaimAnalysis.from_json(lj) == layer  # one codec, both ways
    cj["rows"][1]["best_lr_gain"]["mean"] = "high"
    with pytest.raises(ResultFileError, match=r"rows\[1\].best_lr_gain.mean: 'high' is not a number"):
        ClaimAnalysis.from_json(cj)


def test_analysis_within_type_and_partial_by_hand():
    measured, summaries = _made_up()
    units = units_of(measured, ["MHA", "LN1"])
    an = analyse(measured, summaries, units=ClaimUnits.per_layer(units), lrs=[1e-3, 1e-2], seeds=[0, 1],
                 bootstrap=100, permutations=500)
    assert [r["unit"] for r in an["rows"]] == ["MHA@0", "MHA@1", "MHA@2", "LN1@0", "LN1@1", "LN1@2"]
    assert [r["plasticity"] for r in an["rows"]] == pytest.approx([0.5, 1.0, 1.5, 0.2, 0.4, 0.6])
    gains = [r["best_lr_gain"]["mean"] for r in an["rows"]]
    assert gains == pytest.approx([0.01, 0.02, 0.03, 0.10, 0.11, 0.12])
    w = an["within_type"]
    # within each type the orders agree: pooled rho 1, and of the 3! x 3! = 36 within-type
    # permutations only the identity reaches it
    assert w["pooled_spearman"] == pytest.approx(1) and w["exact"] and w["permutations"] == 36
    assert w["stratified_p_greater"] == pytest.approx(1 / 36)
    assert w["per_type"]["MHA"]["spearman"] == pytest.approx(1)
    assert w["per_type"]["LN1"]["trainable_params"] == 13
    # across all units plasticity does not order the gains (the LN1 units gain most), size does (inversely)
    assert an["correlations"]["spearman"]["value"] < 0.5
    assert an["params_correlations"]["spearman"]["value"] < 0
    # with size held fixed the association is positive
    assert an["partial"]["spearman"] > 0.5
    # lr: the larger of the two is best everywhere -> every row at the grid's high edge, flagged
    assert all(r["lr_edge"] == "high" for r in an["rows"]) and "head" in an["lr_edges"]


def test_criteria_rows_within_types_by_hand():
    measured, summaries = _made_up()
    units = units_of(measured, ["MHA", "LN1"])
    criteria = {
        "plasticity": {"MHA@0": 0.5, "MHA@1": 1.0, "MHA@2": 1.5, "LN1@0": 0.2, "LN1@1": 0.4, "LN1@2": 0.6},
        "rgn": {"MHA@0": 3.0, "MHA@1": 2.0, "MHA@2": 1.0, "LN1@0": 3.0, "LN1@1": 1.0, "LN1@2": 2.0},
        "spectral": {"MHA@0": 1.0, "MHA@1": 2.0, "MHA@2": 3.0},  # undefined on LayerNorms
        "size": {"MHA@0": 105, "MHA@1": 105, "MHA@2": 105, "LN1@0": 13, "LN1@1": 13, "LN1@2": 13},
    }
    an = analyse(measured, summaries, units=ClaimUnits.per_layer(units), lrs=[1e-3, 1e-2], seeds=[0, 1],
                 bootstrap=100, permutations=500, criteria=criteria)
    rows = {r["criterion"]: r for r in an["criteria"]}
    assert all(r["granularity"] == "layer" for r in rows.values())
    # plasticity orders the gains inside each type: pooled rho 1, only 1 of the 3! x 3! orders reaches it
    p = rows["plasticity"]
    assert p["n"] == 6 and p["spearman"] == pytest.approx(1) and p["kendall"] == pytest.approx(1)
    assert p["p_value"] == pytest.approx(1 / 36) and p["spearman"] == an["within_type"]["pooled_spearman"]
    assert p["partial_size"] == pytest.approx(an["partial"]["spearman"])
    # rgn: MHA reversed (rho -1), LN1 rho -0.5: pooled (3 x -1 + 3 x -0.5) / 6 = -0.75
    assert rows["rgn"]["spearman"] == pytest.approx(-0.75) and rows["rgn"]["p_value"] > 0.5
    # spectral: 3 MHA units only; one type, its 3! orders
    assert rows["spectral"]["n"] == 3 and rows["spectral"]["p_value"] == pytest.approx(1 / 6)
    # size is constant within each type: no within-type rank correlation, and no partial on itself
    assert rows["size"]["spearman"] is None and rows["size"]["partial_size"] is None
    assert all(r["spearman_ci"] == [None, None] for r in rows.values())  # 2 seeds: no bootstrap interval


TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, granularity="layer",
            model_kwargs=dict(patch_size=8, depth=2, embed_dim=32, num_heads=2),
            pretrain_data="synthetic", data="synthetic", components="MHA,LN1", lr="3e-3", optimizer="sgd",
            seed="0,1", steps=4, batch_size=16, checkpoint_every=2, pairs=24, pair_batch=4,
            bootstrap=100, permutations=200, draws=2, criteria="plasticity,size", reporter=quiet())


def _claim(out, **kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no weights given.*")
        return claim(out=str(out), **{**TINY, **kw})


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("claim_layers") / "whole"
    return out, _claim(out)


@pytest.mark.slow
def test_layer_claim_end_to_end(whole):
    out, res = whole
    saved = json.loads((out / "claim.json").read_text())
    an = saved["analysis"]
    assert [r["unit"] for r in an["rows"]] == ["MHA@0", "MHA@1", "LN1@0", "LN1@1"]
    for r in an["rows"]:
        assert r["plasticity"] > 0 and r["trainable_params"] > 0 and len(r["best_lr_gain_per_seed"]) == 2
    assert set(an["within_type"]["per_type"]) == {"MHA", "LN1"}
    assert an["within_type"]["exact"] and an["within_type"]["permutations"] == 4  # (2!)^2
    assert "spearman" in an["partial"]
    # the default budget, twice the largest unit (MHA's, 2 x 4,224 parameters), holds every maximal set
    budgets = an["budgets"]
    assert budgets["unit"] == "parameters" and [b["budget"] for b in budgets["budgets"]] == [8448]
    picks = {r["criterion"]: r["train"] for r in budgets["rows"]}
    assert picks["attention"] == "MHA@0+MHA@1" and budgets["full"]["relative_gain"] is not None
    assert budgets["budgets"][0]["enumerated"]
    record = json.loads((out / "criteria.json").read_text())
    assert [(r["criterion"], r["granularity"], r["n"]) for r in record["rows"]] == [
        ("plasticity", "layer", 4), ("size", "layer", 4)]
    assert {r["criterion"] for r in record["budget_rows"]} == {"plasticity", "size", "attention"}
    text = (out / "claim.txt").read_text()
    for words in ("within component type", "stratified permutation p", "partial Spearman",
                  "selection at equal budget", "what this can and cannot tell",
                  "twice the smaller one-sided p"):
        assert words in text, words
    assert (out / "claim.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    trains = {p.name.rsplit("-lr", 1)[0] for p in (out / "runs").iterdir()}
    assert {"MHA@0", "LN1@1", "head", "full", "MHA@0_MHA@1", "MHA@1_LN1@0_LN1@1"} <= trains
    # 4 units + head, and for the budget its 3 maximal sets (none a single unit) and full: 9 trains x 2 seeds
    assert res.plan["runs"] == res.plan["trained"] == 18 and res.plan["budget_runs"] == 8


@pytest.mark.slow
def test_layer_claim_killed_resumes_to_the_same_table(whole, tmp_path):
    out, res = whole
    # the claim as it stood after seed 0: seed 1's runs not started, its reports not written
    shutil.copytree(out, tmp_path / "k")
    for run in (tmp_path / "k" / "runs").glob("*-s1"):
        shutil.rmtree(run)
    for name in ("claim.json", "claim.txt", "claim.png"):
        (tmp_path / "k" / name).unlink()
    with pytest.raises(Killed):
        _claim(tmp_path / "k", after_step=kill_after(3))  # killed after step 3 of seed 1's first run
    partial = sorted(r for r in (tmp_path / "k" / "runs").glob("*-s1") if not (r / "summary.json").exists())
    assert len(partial) == 1 and (partial[0] / "checkpoint.pt").exists()
    resumed = _claim(tmp_path / "k")
    assert resumed.plan["reused"] == res.plan["trained"] // 2
    assert [r["final_acc"] for r in resumed.runs] == [r["final_acc"] for r in res.runs]
    assert resumed.analysis.rows == res.analysis.rows
    assert resumed.analysis.within_type == res.analysis.within_type
    again = _claim(out)  # everything reused
    assert again.plan["trained"] == 0 and again.analysis.budgets == res.analysis.budgets


@pytest.mark.slow
def test_layer_dry_run_measures_but_writes_nothing(tmp_path):
    said = []
    res = _claim(tmp_path / "d", dry_run=True, steps=None, calibrate_steps=2, reporter=collecting(said))
    assert not (tmp_path / "d").exists()  # the units come from a measurement, kept in memory only
    assert res.plan["trains"][:4] == ["MHA@0", "MHA@1", "LN1@0", "LN1@1"] and res.config["steps"] == 60
    assert any("60 steps per run by default" in s for s in said)


@pytest.mark.parametrize("args, message", [
    (["--budgets", "6"], "--budgets: a budget counts components at --granularity component; at most 5"),
    (["--granularity", "layer", "--baseline", "initial"], "--baseline head"),
    (["--granularity", "block"], "--granularity: must be one of component, layer"),
    (["--granularity", "layer", "--draws", "0"], "--draws: must be a positive integer, got 0"),
])
def test_cli_errors(args, message, tmp_path, capsys):
    try:
        rc = cli_main(["claim", "--out", str(tmp_path / "o"), "--no-progress", *args])
    except SystemExit as exc:
        rc = exc.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------ --lr auto
def _summ(train, lr, accs):
    return [{"train": train, "lr": lr, "seed": s, "final_acc": a, "initial_acc": 0.1, "trainable_params": 9}
            for s, a in enumerate(accs)]


def test_lr_auto_widens_only_at_edges_and_is_bounded():
    start = [1e-3, 1e-2]
    s = _summ("A", 1e-3, [0.5, 0.5]) + _summ("A", 1e-2, [0.7, 0.7])  # best at the top
    s += _summ("B", 1e-3, [0.9, 0.9]) + _summ("B", 1e-2, [0.2, 0.2])  # best at the bottom
    assert widen(s, start) == [("A", 0.03), ("B", 0.00033)]
    # a fake trainer where accuracy keeps rising with lr for A: four steps up (LR_AUTO_STEPS), then it stops
    assert LR_AUTO_STEPS == 4
    acc_of = {"A": lambda lr: 0.7 + lr / 10, "B": lambda lr: 0.3}  # B: 1e-3 stays best, now interior
    jobs, out = _widened(s, start, acc_of)
    assert sorted({(j["train"], j["lr"]) for j in jobs}) == [("A", 0.03), ("A", 0.09), ("A", 0.27),
                                                              ("A", 0.81), ("B", 0.00033)]
    assert lrs_run(out) == [0.00033, 1e-3, 1e-2, 0.03, 0.09, 0.27, 0.81]
    assert widen(out, start) == []  # A still at its top edge, but its four steps up are used
    # the analysis reads the ragged grid: each train's lrs are the ones it ran at
    trains, seeds = ["A", "B"], [0, 1]
    acc, _, _ = accuracy_cube(out, trains, lrs_run(out), seeds)
    assert np.isnan(acc[0, 0]).all() and np.isfinite(acc[1, 0]).all()
    assert lr_edge(acc, 0, 6) == "high" and lr_edge(acc, 1, 0) == "low"
    with pytest.raises(ValueError, match="has no summary"):
        accuracy_cube(out[:-1], trains, lrs_run(out), seeds)  # one seed of a (train, lr) missing


def _widened(s, start, acc_of):
    """`widen_groups` over one group with a fake trainer: accuracy ``acc_of[train](lr)``, two seeds."""
    jobs, groups = widen_groups(
        {"": s}, start={"": start}, say=lambda *a: None,
        plan=lambda _, t, lr: [{"train": t, "lr": lr, "seed": k} for k in (0, 1)],
        train=lambda js: [{**j, "final_acc": acc_of[j["train"]](j["lr"]), "initial_acc": 0.1,
                           "trainable_params": 9} for j in js])
    return jobs, groups[""]


def test_lr_auto_a_diverged_run_brackets_the_lr_below_it():
    """A's accuracy rises with lr until the run diverges (at 0.27: chance accuracy): the widening stops
    there and A's best lr, 0.09, is interior."""
    start = [1e-3, 1e-2]
    s = _summ("A", 1e-3, [0.5, 0.5]) + _summ("A", 1e-2, [0.7, 0.7])
    jobs, out = _widened(s, start, {"A": lambda lr: 0.1 if lr > 0.1 else 0.7 + lr})
    assert sorted({j["lr"] for j in jobs}) == [0.03, 0.09, 0.27] and widen(out, start) == []
    acc, _, _ = accuracy_cube(out, ["A"], lrs_run(out), [0, 1])
    best = int(np.argmax(acc[0].mean(-1)))
    assert lrs_run(out)[best] == 0.09 and lr_edge(acc, 0, best) is None


def test_lr_auto_widens_until_neither_the_held_out_nor_the_final_best_lr_is_clipped():
    """The held-out images say A's best lr is the bottom one (the lr the claim chooses), the final
    accuracy the top one (where the paper reads its gain): the grid widens on both sides. Where both
    agree, one side. A train with a run lacking held-out accuracy is judged on the final one alone."""
    start = [1e-3, 1e-2]
    s = [{**r, "holdout_acc": 0.8} for r in _summ("A", 1e-3, [0.5, 0.5])]
    s += [{**r, "holdout_acc": 0.6} for r in _summ("A", 1e-2, [0.7, 0.7])]
    assert widen(s, start) == [("A", 0.03), ("A", 0.00033)]
    agree = [{**r, "holdout_acc": r["final_acc"]} for r in s]
    assert widen(agree, start) == [("A", 0.03)]
    s[0] = {**s[0], "holdout_acc": None}
    assert widen(s, start) == [("A", 0.03)]
