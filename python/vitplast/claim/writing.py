"""The files a claim writes once analysed, by the first rank: per dataset claim.json, criteria.json
(`criteria_record`), claim.txt, claim.png and budgets.png (in OUT, or OUT/datasets/NAME/ over several
datasets), and over several the aggregate's (OUT/aggregate.json, .txt, .png); each report also said
on the reporter."""

from __future__ import annotations

from pathlib import Path

from vitplast_kernels.atomic_io import atomic_write_bytes

from ..outputs.result_files import write_result_json
from .figure import claim_figures, save_figures
from .grid import ClaimPlan
from .records import CLAIM_FORMAT, ClaimAnalysis, encode
from .result import ClaimResult
from .session import ClaimSession

CRITERIA_FORMAT, AGGREGATE_FORMAT = ("vitplast-criteria", 1), ("vitplast-aggregate", 1)  # (kind, version)


def write_claim(result: ClaimResult, plan: ClaimPlan, ses: ClaimSession, out: Path) -> ClaimResult:
    """Each dataset's files (claim.json, criteria.json, claim.txt, then its figures), over several
    datasets the aggregate's in ``out`` (``--out``), all by the first rank; then the lines that name
    them on the reporter (one dataset: its report first; several: the aggregate's). Returns
    ``result``."""
    arms = result.arms()
    reports = [(g, arms[g.dataset.name if plan.several else ""]) for g in plan.grids]
    if ses.dist.is_main:
        files = [(g.dataset.out, {"claim.json": (r.to_json(), CLAIM_FORMAT), "criteria.json": (
                      criteria_record(r.analysis, r.measurement), CRITERIA_FORMAT)}, {"claim.txt": r.text})
                 for g, r in reports]
        if plan.several:
            files.append((out, {"aggregate.json": (result.to_json(), AGGREGATE_FORMAT)},
                          {"aggregate.txt": result.text}))
        for folder, records, texts in files:
            for name, (record, (kind, version)) in records.items():
                write_result_json(folder / name, record, kind=kind, version=version)
            for name, text in texts.items():
                atomic_write_bytes(folder / name, (text + "\n").encode())
        figures = [(r.analysis, r.setup, g.dataset.out) for g, r in reports]
        save_figures(claim_figures(figures, result.aggregate, out))
    for g, r in reports:
        folder, counts = g.dataset.out, r.plan
        if not plan.several:
            ses.reporter.say(r.text)
        named = g.dataset.name + ": " if plan.several else ""
        ses.reporter.say(f"({named}{counts['trained']} runs trained, {counts['reused']} reused, "
                         f"{counts['seconds']:.0f} s; wrote {folder / 'claim.json'}, {folder / 'claim.txt'}, "
                         f"{folder / 'claim.png'}, {folder / 'budgets.png'})")
    if plan.several:
        ses.reporter.say(result.text)
        ses.reporter.say(f"(wrote {out / 'aggregate.json'}, {out / 'aggregate.txt'}, "
                         f"{out / 'aggregate.png'}; each dataset's report in {out / 'datasets'})")
    return result


def criteria_record(an: ClaimAnalysis, measurement: dict) -> dict:
    """What ``criteria.json`` holds: a row per (criterion, granularity) (``criterion``, ``granularity``,
    ``n``, ``spearman``, ``spearman_ci``, ``kendall``, ``p_value``, ``partial_size``, ``seconds``: the
    ``measurement``'s ``criteria_seconds``), and under ``budget_rows`` a row per (criterion, budget)
    (``criterion``, ``budget``, ``relative_gain``, ``random_percentile``, ``train``, ``random_sets``;
    `vitplast.claim.budgets`) with full finetuning's relative gain beside them
    (``full_relative_gain``)."""
    seconds = measurement.get("criteria_seconds") or {}
    rows = [{**encode(r), "seconds": seconds.get(r.criterion)} for r in an.criteria]
    budgets = an.budgets
    kept = ("criterion", "budget", "relative_gain", "random_percentile", "train", "random_sets")
    budget_rows = [{k: getattr(r, k) for k in kept} for r in (budgets.rows if budgets else [])]
    return {"rows": rows, "budget_rows": budget_rows, "budget_unit": budgets and budgets.unit,
            "full_relative_gain": budgets and budgets.full.relative_gain,
            "note": "higher score = finetune first; p_value: one-sided permutation (H1: rho > 0); "
                    "partial_size: Spearman with the trainable-parameter count held fixed (null for size); "
                    "random_percentile: where the set's relative gain lies among random sets of the same "
                    "budget (mid-rank ties)"}
