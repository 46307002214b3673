"""The GPU targets of the paired and all-pairs kernels against one ``make gpu-check`` run's JSON files.

    python bench/gpu_targets.py OUTDIR        (OUTDIR: where gpu_check wrote bench_gpu.json and
                                               bench_gpu_compare.json; missing files are reported)

Prints one line per target: what is asked, the measured value, MET / MISSED / NOT MEASURED.
Speed targets use the faster GPU backend of each row (what ``backend="auto"`` picks). The
determinism and > 2^31-element targets are pass/fail GPU tests (``gpu-tests`` step of the log), not
figures, and are not repeated here. Exit status 0 whatever the verdicts: this is a report.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Target:
    kernel: str  # "paired" or "all pairs"
    what: str
    measured: float | None
    bound: float
    higher_is_better: bool
    fmt: str
    detail: str = ""

    @property
    def verdict(self) -> str:
        if self.measured is None:
            return "NOT MEASURED"
        ok = self.measured >= self.bound if self.higher_is_better else self.measured <= self.bound
        return "MET" if ok else "MISSED"


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _best(rows: list[dict], case_prefix: str) -> dict | None:
    """The fastest backend's row of a paired case (bf16)."""
    cands = [r for r in rows if r["case"].startswith(case_prefix) and r["dtype"] == "bfloat16"]
    return min(cands, key=lambda r: r["ms"]) if cands else None


def paired_targets(data: dict | None) -> list[Target]:
    rows = data["rows"] if data else []
    out = []
    for case in ("128x257x1280", "128x257x5120"):
        r = _best(rows, case)
        out.append(Target("paired", f"{case} bf16: >= 85% of copy bandwidth", r and r["pct_copy"], 85, True,
                          ".0f", r and r["backend"] or ""))
    g = _best(rows, "vit-h group")
    be = g["backend"] if g else ""
    for what, key, bound, fmt in (
        ("ViT-H 160-tensor group: >= 75% of copy bandwidth", "pct_copy", 75, ".0f"),
        ("ViT-H group: >= 3x a loop of the eager formula", "x_eager", 3.0, ".2f"),
        ("ViT-H group: >= 1.3x a loop of torch.compile", "x_compile", 1.3, ".2f"),
    ):
        out.append(Target("paired", what, g and g[key], bound, True, fmt, be))
    return out


def all_pairs_targets(data: dict | None) -> list[Target]:
    rows = (data or {}).get("sections", {}).get("all pairs", {}).get("rows", [])
    ours = {r["case"]: r for r in rows if r["method"] == "ours" and r["dtype"] == "bfloat16"}
    rnd = ours.get("random")
    errs = [r["err"] for r in ours.values()]
    return [
        Target("all pairs", "N=256, K=257*1280 bf16: >= 2x torch.cdist on fp32", rnd and rnd["x_cdist"],
               2.0, True, ".2f"),
        Target("all pairs", "same: >= 50% of the bf16 mm rate (one triangle)", rnd and rnd["pct_mm"], 50,
               True, ".0f"),
        Target("all pairs", "max relative distance error (random, shared rows)",
               max(errs) if errs else None, 1e-5, False, ".1e"),
    ]


def report(outdir: Path) -> list[Target]:
    paired = _load(outdir / "bench_gpu.json")
    pairs = _load(outdir / "bench_gpu_compare.json")
    for name, d in (("bench_gpu.json", paired), ("bench_gpu_compare.json", pairs)):
        if d is None:
            print(f"# {outdir / name}: missing or unreadable", file=sys.stderr)
    return paired_targets(paired) + all_pairs_targets(pairs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    args = ap.parse_args(argv)
    targets = report(args.outdir)
    print(f"{'kernel':9}  {'target':52}  {'measured':>9}  {'verdict':12}  backend")
    for t in targets:
        value = "-" if t.measured is None else format(t.measured, t.fmt)
        print(f"{t.kernel:9}  {t.what:52}  {value:>9}  {t.verdict:12}  {t.detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
