"""Redraws the figures of docs/guides/benchmarks.md and docs/guides/claim.md from the raw runs kept in
bench/measured/: the chart ``python -m bench.compare --plot PATH`` draws (one panel per section, the
speedup over each peer on a log scale), and the claims' figures from their claim.json.

    python docs/assets/draw.py        # from the repository root; writes docs/assets/*.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "bench" / "measured"
OUT = Path(__file__).resolve().parent

# figure -> (raw run, title)
CHARTS = {
    "bench_cpu_paired.png": ("cpu-2026-12-02-eager-hooks/paired_auto_1.json",
                             "paired op, 2-core CPU VM (AVX-512), 2026-12-02, --quick"),
    "bench_gpu_all_pairs.png": ("h200-2026-11-30/bench_gpu_compare.json",
                                "all pairs, one H200, 2026-11-30, --quick"),
}
CLAIMS = {"claim_layer.png": "cpu-2026-12-01-claim-layer/claim.json",
          "claim_component.png": "cpu-2026-12-02-claim-default/claim.json"}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from vitplast.claim.layer_report import plot_layer_claim
    from vitplast.claim.report import plot_claim

    from bench.compare import plot

    for name, (raw, title) in CHARTS.items():
        plot(json.loads((MEASURED / raw).read_text())["sections"], OUT / name, title)
    gpu = json.loads((MEASURED / "h200-2026-11-30" / "bench_gpu.json").read_text())
    plot({"gpu paired and grouped": {"rows": gpu["rows"]}}, OUT / "bench_gpu_paired.png",
         "paired and grouped, one H200, 2026-11-30 (bench.gpu_paired --quick)")
    for name, raw in CLAIMS.items():
        draw = plot_layer_claim if "layer" in name else plot_claim
        draw(json.loads((MEASURED / raw).read_text()), OUT / name)


if __name__ == "__main__":
    main()
