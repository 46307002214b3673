"""Selection at equal budget (`vitplast.claim.budgets`): the sets each criterion, the attention rule and
chance pick, the mid-rank percentile, the dry run's bound, and end to end on a tiny claim."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import collecting
from vitplast.claim.budgets import (
    MAX_ENUMERATED,
    BudgetSets,
    LoraSizing,
    analyse_budgets,
    component_sets,
    layer_sets,
    maximal_sets,
    percentile_of_score,
    upper_bound,
    with_lora,
)
from vitplast.claim.records import encode

FIVE = ["MHA", "FC1", "FC2", "LN1", "LN2"]


def test_component_sets_every_subset_when_there_are_at_most_50():
    scores = {"plasticity": {"MHA": 3.0, "FC1": 2.0, "FC2": 2.0, "LN1": 0.5, "LN2": 1.0},
              "spectral": {"MHA": 4.0, "FC1": 5.0, "FC2": 3.0, "LN1": None, "LN2": math.nan}}
    one = component_sets(scores, FIVE, 1, draws=3, seed=0)
    assert one.enumerated and one.random == tuple(FIVE)  # C(5, 1): every component alone
    assert one.picks == {"plasticity": "MHA", "spectral": "FC1", "attention": "MHA"}
    two = component_sets(scores, FIVE, 2, draws=3, seed=0)
    assert two.enumerated and len(two.random) == math.comb(5, 2) == 10 and len(set(two.random)) == 10
    # FC1 and FC2 tie at 2.0: the components' order breaks it; members are written in that order too
    assert two.picks["plasticity"] == "MHA+FC1" and two.picks["spectral"] == "MHA+FC1"
    assert two.picks["attention"] is None  # attention in every layer is one component: budget 1 only
    three = component_sets(scores, FIVE, 3, draws=3, seed=0)
    assert three.picks["spectral"] == "MHA+FC1+FC2"  # LN1, LN2 undefined: skipped
    assert component_sets(scores, FIVE, 4, draws=3, seed=0).picks["spectral"] is None  # 3 defined < 4
    # sets several criteria pick are one train (one run per lr and seed)
    assert two.trains.count("MHA+FC1") == 1 and len(two.trains) == 10


def test_lora_takes_the_rank_nearest_each_budget():
    """LoRA's row: at component granularity the rank whose parameters are nearest the median size of the
    budget's random sets, at layer granularity nearest the budget itself; at least rank 1."""
    sizes = {"MHA": 66_560, "FC1": 66_560, "FC2": 65_792, "LN1": 512, "LN2": 512}
    lora = LoraSizing(per_rank=1536, sizes=sizes)
    one = component_sets({}, FIVE, 1, draws=3, seed=0)
    assert lora.train(one, layer=False) == "lora:r=43"  # median 65,792 / 1,536 = 42.8
    two = component_sets({}, FIVE, 2, draws=3, seed=0)  # 10 pairs: 3 big-big, 6 big-small, 1 small-small
    assert lora.train(two, layer=False) == "lora:r=44"  # median 67,072 (MHA or FC1 with an LN) -> 43.7
    assert lora.train(BudgetSets(10_000, {}, (), True), layer=True) == "lora:r=7"  # 6.5 -> 7
    assert lora.train(BudgetSets(5, {}, (), True), layer=True) == "lora:r=1"  # never 0
    picked = with_lora([one, two], lora, layer=False)
    assert [s.picks["lora"] for s in picked] == ["lora:r=43", lora.train(two, layer=False)]
    assert "lora:r=43" in picked[0].trains and with_lora([one], None, layer=False) == [one]


def test_component_sets_are_drawn_beyond_50():
    units = [f"U{i}" for i in range(8)]
    assert math.comb(8, 4) == 70 > MAX_ENUMERATED
    drawn = component_sets({}, units, 4, draws=7, seed=3)
    assert not drawn.enumerated and len(drawn.random) == 7
    for train in drawn.random:
        members = train.split("+")
        assert len(set(members)) == 4 and members == sorted(members, key=units.index)
    assert component_sets({}, units, 4, draws=7, seed=3) == drawn  # seeded by --stats-seed
    assert component_sets({}, units, 4, draws=7, seed=4).random != drawn.random


def test_layer_sets_fill_a_parameter_budget():
    units = ["MHA@0", "MHA@1", "LN1@0", "LN1@1"]
    sizes = {"MHA@0": 100, "MHA@1": 100, "LN1@0": 8, "LN1@1": 8}
    # within 116 parameters no further unit fits: {MHA@0, LN1@0, LN1@1} and {MHA@1, LN1@0, LN1@1}
    assert maximal_sets(units, sizes, 116) == [["MHA@0", "LN1@0", "LN1@1"], ["MHA@1", "LN1@0", "LN1@1"]]
    scores = {"plasticity": {"MHA@0": 0.5, "MHA@1": 1.0, "LN1@0": 0.2, "LN1@1": 0.4},
              "size": {u: float(s) for u, s in sizes.items()}}
    sets = layer_sets(scores, units, sizes, 116, draws=5, seed=0)
    assert sets.enumerated and sets.random == ("MHA@0+LN1@0+LN1@1", "MHA@1+LN1@0+LN1@1")
    assert sets.picks["plasticity"] == "MHA@1+LN1@0+LN1@1"  # MHA@1 first, MHA@0 no longer fits
    assert sets.picks["attention"] is None  # MHA in every layer: 200 parameters > 116
    wide = layer_sets(scores, units, sizes, 200, draws=5, seed=0)
    assert wide.picks["attention"] == "MHA@0+MHA@1" and wide.picks["size"] == "MHA@0+MHA@1"
    with pytest.raises(ValueError, match="--budgets 4: no \\(component, layer\\) unit fits"):
        layer_sets(scores, units, sizes, 4, draws=5, seed=0)


def test_layer_sets_are_drawn_when_there_are_too_many():
    units = [f"FC1@{i}" for i in range(17)]  # 2**17 subsets: not enumerated
    sizes = dict.fromkeys(units, 10)
    sets = layer_sets({}, units, sizes, 30, draws=4, seed=0)
    assert not sets.enumerated and len(sets.random) == 4
    assert all(len(t.split("+")) == 3 for t in sets.random)  # a greedy fill: 3 units of 10 in 30


def test_percentile_counts_ties_half():
    random = np.array([1.0, 2.0, 3.0])
    assert percentile_of_score(2.0, random) == pytest.approx(50.0)  # (1 below + 2 at or below) / 2 / 3
    assert percentile_of_score(3.0, random) == pytest.approx(100 * 2.5 / 3)
    assert percentile_of_score(0.0, random) == 0.0 and percentile_of_score(4.0, random) == 100.0
    assert percentile_of_score(1.0, np.array([1.0, 1.0, 1.0, 1.0])) == pytest.approx(50.0)
    assert percentile_of_score(1.0, np.array([0.0, 1.0, math.nan])) == pytest.approx(75.0)  # NaN left out
    assert math.isnan(percentile_of_score(math.nan, random))
    assert math.isnan(percentile_of_score(1.0, np.array([math.nan])))


def test_upper_bound_of_the_runs_the_scores_may_add():
    enumerated = BudgetSets(2, {"attention": None}, ("A+B",), True)
    drawn = BudgetSets(4, {"attention": None}, ("A+B+C+D",), False)
    # enumerated component sets hold every criterion's set; drawn ones may not: one per criterion
    assert upper_bound([enumerated, drawn], n_criteria=6, layer=False) == {"per_budget": {2: 0, 4: 6},
                                                                             "sets": 6}
    # at layer granularity a criterion undefined on some units may pick a set that is not maximal
    assert upper_bound([enumerated], n_criteria=2, layer=True)["sets"] == 2


def _summaries(acc: dict) -> list[dict]:
    return [{"train": t, "lr": lr, "seed": s, "final_acc": a, "initial_acc": 0.1, "trainable_params": len(t)}
            for t, by_lr in acc.items() for lr, per_seed in by_lr.items() for s, a in enumerate(per_seed)]


def test_analyse_budgets_relative_gain_and_percentile_by_hand():
    acc = {"head": {0.1: [0.4, 0.4], 0.2: [0.5, 0.5]},  # acc_LP = 0.5 (best lr 0.2)
           "A": {0.1: [0.6, 0.8]}, "B": {0.1: [0.5, 0.5]}, "C": {0.1: [0.75, 0.75]},
           "full": {0.1: [0.9, 0.9]}}
    sets = [BudgetSets(1, {"plasticity": "A", "size": "B", "attention": None}, ("A", "B", "C"), True)]
    out = encode(analyse_budgets(sets, _summaries(acc), seeds=[0, 1], unit="components"))
    rows = {r["criterion"]: r for r in out["rows"]}
    assert rows["plasticity"]["relative_gain"] == pytest.approx(0.4)  # (0.7 - 0.5) / 0.5
    assert rows["size"]["relative_gain"] == pytest.approx(0.0)
    # random gains 0.4, 0, 0.5: A is above one, equal to one (half), below one
    assert rows["plasticity"]["random_percentile"] == pytest.approx(50.0)
    assert rows["size"]["random_percentile"] == pytest.approx(100 / 6)
    assert rows["attention"]["train"] is None and rows["attention"]["random_percentile"] is None
    assert out["full"]["relative_gain"] == pytest.approx(0.8)
    spread = out["budgets"][0]
    assert spread["random_sets"] == 3 and spread["random_relative_gain"]["max"] == pytest.approx(0.5)


@pytest.mark.slow
def test_claim_with_budgets_writes_its_rows_and_a_rerun_trains_nothing(tmp_path):
    from test_claim_end_to_end import _claim

    said: list[str] = []
    kw = dict(budgets="1,2", criteria="plasticity,size")
    dry = _claim(tmp_path / "b", dry_run=True, reporter=collecting(said), **kw)
    # 3 components and head, then for budget 2 the C(3, 2) = 3 pairs (every criterion's pair among
    # them) and full finetuning: 4 sets x 1 lr x 2 seeds, none added after scoring
    assert dry.plan["runs"] == 16 and dry.plan["budget_runs"] == 8
    assert dry.plan["budget_runs_after_scoring_at_most"] == 0 and dry.plan["budget_runs_at_most"] == 8
    assert any("budgets 1, 2 (components): 8 of these runs" in s and "at most 8 runs for the budgets" in s
               for s in said)
    res = _claim(tmp_path / "b", **kw)
    assert res.plan["trained"] == 16 and res.plan["budget_runs"] == 8
    record = json.loads((tmp_path / "b" / "criteria.json").read_text())
    rows = {(r["criterion"], r["budget"]): r for r in record["budget_rows"]}
    assert set(rows) == {(c, b) for c in ("plasticity", "size", "attention") for b in (1, 2)}
    assert rows[("attention", 1)]["train"] == "MHA" and rows[("attention", 2)]["train"] is None
    assert all(r["random_sets"] == 3 for r in rows.values())
    for (c, b), r in rows.items():
        assert (r["relative_gain"] is None) == (c == "attention" and b == 2)
        assert r["random_percentile"] is None or 0 <= r["random_percentile"] <= 100
        assert r["train"] is None or len(r["train"].split("+")) == b
    assert record["full_relative_gain"] == res.analysis.budgets.full.relative_gain is not None
    assert "selection at equal budget" in (tmp_path / "b" / "claim.txt").read_text()
    assert (tmp_path / "b" / "budgets.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = _claim(tmp_path / "b", **kw)
    assert again.plan["trained"] == 0 and again.plan["reused"] == 16
    assert again.analysis.budgets == res.analysis.budgets


@pytest.mark.slow
def test_a_criterion_set_outside_the_random_sets_is_trained_after_scoring(tmp_path):
    from test_layer_claim import _claim

    # FC1 4,224 + FC1 4,224 + LN1 64 fit 8,512 parameters: the 4 maximal sets are planned with the units;
    # spectral is undefined on LayerNorms, so its set FC1@0+FC1@1 is not maximal and waits for the scores
    kw = dict(components="FC1,LN1", optimizer="sgd", criteria="plasticity,spectral", budgets="8512",
              seed="0", jobs=1,
              threads=1, progress=False)
    first = _claim(tmp_path / "l", shard="1/1", **kw)  # a shard trains the planned runs only
    assert first.plan["runs"] == 10 and first.plan["budget_runs_after_scoring_at_most"] == 2
    assert first.plan["budget_runs_at_most"] == 5 + 2  # 4 maximal sets and full, then spectral's
    with pytest.raises(ValueError, match="--analyse-only: 1 of 1 runs are not finished .*FC1@0_FC1@1"):
        _claim(tmp_path / "l", analyse_only=True, **kw)
    res = _claim(tmp_path / "l", **kw)
    assert res.plan["trained"] == 1 and res.plan["budget_runs"] == 6
    rows = {r.criterion: r for r in res.analysis.budgets.rows}
    assert rows["spectral"].train == "FC1@0+FC1@1" and rows["spectral"].random_sets == 4
    assert rows["attention"].train is None  # no MHA unit
    again = _claim(tmp_path / "l", analyse_only=True, **kw)
    assert again.plan["trained"] == 0 and again.analysis.budgets == res.analysis.budgets
