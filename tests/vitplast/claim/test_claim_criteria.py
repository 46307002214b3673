"""The claim's criteria rows: each criterion's scores against the accuracy gains, as plasticity's."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_claim_end_to_end import _made_up
from vitplast.claim.analysis import analyse as typed_analysis
from vitplast.claim.records import ClaimAnalysis
from vitplast.claim.report import criteria_lines
from vitplast.claim.units import ClaimUnits


def analyse(*args, **kwargs) -> dict:
    """The analysis as claim.json holds it."""
    return typed_analysis(*args, **kwargs).to_json()


def _analysed(criteria):
    measured, summaries = _made_up()
    return analyse(measured, summaries, units=ClaimUnits.whole(["MHA", "FC1", "LN1"]),
                 lrs=[1e-3, 1e-2], seeds=[0, 1],
                   bootstrap=100, criteria=criteria)


def test_each_criterion_is_correlated_with_the_gains():
    an = _analysed({"size": {"MHA": 100, "FC1": 80, "LN1": 8},
                    "rgn": {"MHA": 0.1, "FC1": 0.2, "LN1": 0.3},
                    "spectral": {"MHA": 2.0, "FC1": 3.0, "LN1": None}})
    rows = {r["criterion"]: r for r in an["criteria"]}
    assert list(rows) == ["plasticity", "size", "rgn", "spectral"]
    # gains rank MHA > FC1 > LN1, as plasticity (3, 2, 1) and size do; rgn ranks them the other way
    assert rows["plasticity"]["spearman"] == pytest.approx(1.0)
    assert rows["plasticity"]["p_value"] == pytest.approx(1 / 6) and rows["plasticity"]["n"] == 3
    assert rows["size"]["spearman"] == pytest.approx(1.0) and rows["size"]["partial_size"] is None
    assert rows["rgn"]["spearman"] == pytest.approx(-1.0) and rows["rgn"]["p_value"] == pytest.approx(1.0)
    assert rows["rgn"]["kendall"] == pytest.approx(-1.0)
    # LN1 has no spectral score: 2 units left, too few for a rank correlation
    assert rows["spectral"]["n"] == 2 and rows["spectral"]["spearman"] is None
    # 2 seeds: no bootstrap interval for any criterion
    assert all(r["spearman_ci"] == [None, None] for r in rows.values())
    assert all(r["granularity"] == "component" for r in rows.values())
    text = "\n".join(criteria_lines(ClaimAnalysis.from_json(an).criteria))
    assert "criteria vs accuracy gain" in text and "rgn" in text and "[no interval]" in text


def test_partial_on_size_vanishes_when_size_ranks_like_the_gains():
    an = _analysed({"cka": {"MHA": 0.9, "FC1": 0.1, "LN1": 0.5}})
    row = an["criteria"][1]
    assert row["criterion"] == "cka" and row["spearman"] == pytest.approx(0.5)
    # sizes 100 > 80 > 8 rank as the gains do: nothing is left for cka to explain
    assert row["partial_size"] is None or abs(row["partial_size"]) < 1e-6


def test_mha_is_tested_over_dataset_and_seed_pairs_across_datasets():
    from vitplast.claim.aggregate import Arm, aggregate_claims, format_aggregate

    arms = {name: Arm(ClaimAnalysis.from_json(_analysed(None)), name) for name in ("a", "b")}
    agg = aggregate_claims(arms, permutations=50)
    fc1 = agg.mha_tests.comparisons["FC1"]
    assert fc1.n == 4  # 2 datasets x 2 seeds
    assert fc1.mean_difference == pytest.approx(0.25)  # MHA 0.9/1.0 vs FC1 0.7/0.7, twice
    assert fc1.wilcoxon_p_holm >= fc1.wilcoxon_p
    assert "vs FC1" in format_aggregate(agg) and "n = 4" in format_aggregate(agg)


def test_optimisers_are_arms_pooled_and_an_edge_withholds_the_verdict():
    """Two arms of one dataset (SGD, AdamW): the aggregate names each arm's optimiser, calls its strata
    arms, and withholds its verdict while a ranked unit's best lr sits at an edge of its arm's grid (the
    made-up grid has two lrs: every best lr is at an edge)."""
    from vitplast.claim.aggregate import Arm, aggregate_claims, aggregate_verdict, format_aggregate

    arms = {f"d-{opt}": Arm(ClaimAnalysis.from_json(_analysed(None)), "d", opt) for opt in ("sgd", "adamw")}
    agg = aggregate_claims(arms, permutations=50)
    assert [d.optimizer for d in agg.datasets.values()] == ["sgd", "adamw"]
    assert agg.datasets["d-sgd"].unbracketed == ["MHA", "FC1", "LN1"]  # ranked units only, not the head
    verdict = aggregate_verdict(agg)
    assert verdict.startswith("not bracketed:") and "d-sgd: MHA, FC1, LN1" in verdict, verdict
    text = format_aggregate(agg)
    assert "across 2 arms (dataset x optimiser)" in text and "pooled within arms" in text
    assert any(line.split()[:3] == ["d-adamw", "d", "adamw"] for line in text.splitlines())
    bracketed = {name: a._replace(analysis=dataclasses.replace(a.analysis, lr_edges=[]))
                 for name, a in arms.items()}
    assert aggregate_verdict(aggregate_claims(bracketed, permutations=50)).startswith(
        ("supported across arms", "not established across arms"))


@pytest.mark.slow
def test_claim_writes_criteria_json_and_reuses_the_scores(tmp_path):
    from helpers import collecting
    from test_claim_end_to_end import _claim

    said: list[str] = []
    res = _claim(tmp_path / "c", criteria="plasticity,size,rgn", seed="0,1", reporter=collecting(said))
    record = json.loads((tmp_path / "c" / "criteria.json").read_text())
    rows = {r["criterion"]: r for r in record["rows"]}
    assert list(rows) == ["plasticity", "size", "rgn"]
    assert all(r["granularity"] == "component" and r["n"] == 3 for r in rows.values())
    assert rows["size"]["partial_size"] is None and rows["rgn"]["seconds"] > 0
    assert rows["plasticity"]["seconds"] == res.measurement["seconds"]
    timeless = [{k: v for k, v in r.items() if k != "seconds"} for r in record["rows"]]
    assert timeless == res.analysis.to_json()["criteria"]
    rgn = json.loads((tmp_path / "c" / "criteria" / "rgn.json").read_text())
    assert set(rgn["components"]["MHA"]["per_seed"]) == {"0", "1"}  # one head per seed's run
    said.clear()
    _claim(tmp_path / "c", criteria="plasticity,size,rgn", seed="0,1", reporter=collecting(said))
    assert any("size reused" in s and "rgn reused" in s for s in said)
