"""The files a claim writes once analysed, by the first rank: per dataset claim.json, criteria.json,
claim.txt, claim.png and budgets.png (in OUT, or OUT/datasets/NAME/ over several datasets), and over
several the aggregate's (OUT/aggregate.json, .txt, .png); each report also said on the reporter."""

from __future__ import annotations

from pathlib import Path

from vitplast_kernels.atomic_io import atomic_write_bytes

from ..runs.rundir import write_json_atomic
from .aggregate import plot_aggregate
from .budget_report import plot_budgets
from .criteria_scores import criteria_record
from .grid import ClaimPlan, DatasetGrid
from .layer_report import plot_layer_claim
from .report import plot_claim
from .session import ClaimSession


def write_claim(result: dict, plan: ClaimPlan, ses: ClaimSession, out: Path) -> dict:
    """Each dataset's files and report (`write_dataset`), then over several datasets the aggregate's
    in ``out`` (``--out``); returns ``result``."""
    for g in plan.grids:
        write_dataset(result["datasets"][g.dataset.name] if plan.several else result, g, ses,
                      say=not plan.several)
    if not plan.several:
        return result
    if ses.dist.is_main:
        write_json_atomic(out / "aggregate.json",
                          {k: v for k, v in result.items() if k not in ("text", "datasets")})
        atomic_write_bytes(out / "aggregate.txt", (result["text"] + "\n").encode())
        plot_aggregate(result["aggregate"], out / "aggregate.png")
    ses.reporter.say(result["text"])
    ses.reporter.say(f"(wrote {out / 'aggregate.json'}, {out / 'aggregate.txt'}, {out / 'aggregate.png'}; "
                     f"each dataset's report in {out / 'datasets'})")
    return result


def write_dataset(result: dict, g: DatasetGrid, ses: ClaimSession, *, say: bool) -> None:
    """claim.json, criteria.json, claim.txt, claim.png and budgets.png of one dataset (rank 0), and
    the line naming them on the reporter (``say``: its report too)."""
    out = g.dataset.out
    if ses.dist.is_main:
        records = {"claim.json": {k: v for k, v in result.items() if k != "text"},
                   "criteria.json": criteria_record(result)}
        for name, record in records.items():
            write_json_atomic(out / name, record)
        atomic_write_bytes(out / "claim.txt", (result["text"] + "\n").encode())
        (plot_layer_claim if g.units is not None else plot_claim)(result, out / "claim.png")
        plot_budgets(result, out / "budgets.png")
    plan = result["plan"]
    if say:
        ses.reporter.say(result["text"])
    ses.reporter.say(f"({g.dataset.name + ': ' if g.dataset.several else ''}{plan['trained']} runs trained, "
                     f"{plan['reused']} reused, {plan['seconds']:.0f} s; wrote {out / 'claim.json'}, "
                     f"{out / 'claim.txt'}, {out / 'claim.png'}, {out / 'budgets.png'})")
