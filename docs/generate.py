"""Makes every table, figure and number the documentation shows from a command, by running that
command: ``make docs-data`` (= ``python docs/generate.py``, from the repository root). Pages include
the files it writes (tables through ``--8<--`` snippets, figures as images); none is copied by hand.

    python docs/generate.py               # every part (about 10 min on 2 CPU cores)
    python docs/generate.py demo compare  # some parts

Parts and what they write under ``docs/generated/``:

- ``demo``: ``vitplast measure`` of the shipped digits ViT -> ``demo/`` (its JSON, figures and the
  printed table, ``table.txt``); the same on every machine up to float rounding (the weights ship);
- ``compare``: a finetuning run of MHA, its measurement and ``vitplast compare`` against the demo ->
  ``finetune/`` (the run's figures), ``after/`` and ``compare/`` (table and figure). Training makes
  these numbers depend on the machine: ``SOURCES.json`` names the machine, date and command;
- ``grid``: a one-seed finetuning grid -> ``grid/`` (its two figures);
- ``claim``: the default ``vitplast claim`` (criteria compared included, momentum SGD and AdamW) ->
  ``claim/``: the aggregate over its arms (``aggregate.txt``, ``.json``, ``.png`` and ``tables.md``)
  and one folder per arm (``claim/ARM/``: its report, JSON files, figures and ``tables.md``);
  machine-dependent like every trained number, see ``SOURCES.json``;
- ``charts``: the benchmark charts and the claims' figures, redrawn from the raw runs kept in
  ``bench/measured/`` (each file there names its machine, date and command).

``tests/docs/test_generated.py`` reruns the cheap parts (the demo, the comparison of committed runs) and
compares them with the committed files.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import platform
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path("docs/generated")  # relative to ROOT, where every command runs: the files name no machine path
WORK = Path("build/docs-data")  # the runs the figures come from (git ignores build/)
MEASURED = ROOT / "bench" / "measured"

DEMO = ["measure", "--out", "{out}/demo", "--no-progress"]
FINETUNE = ["finetune", "--train", "MHA", "--out", "{tmp}/runs/mha", "--no-progress"]
AFTER = ["measure", "--weights", "{tmp}/runs/mha", "--out", "{out}/after", "--no-progress"]
COMPARE = ["compare", "{out}/demo", "{out}/after", "--labels", "pretrained,finetuned-MHA", "--out",
           "{out}/compare"]
CLAIM = ["claim", "--out", "{tmp}/runs/claim", "--no-progress"]
GRID = ["finetune", "--train", "head,MHA,FC1", "--steps", "60", "--out", "{tmp}/runs/grid", "--no-progress"]
# benchmark chart -> (raw run under bench/measured, title)
CHARTS = {
    "bench_cpu_paired.png": ("cpu-2026-12-02-eager-hooks/paired_auto_1.json",
                             "paired op, 2-core CPU VM (AVX-512), 2026-12-02, --quick"),
    "bench_gpu_all_pairs.png": ("h200-2026-11-30/bench_gpu_compare.json",
                                "all pairs, one H200, 2026-11-30, --quick"),
}
# the layer claim's figure, redrawn from a run of 2026-12-01 (the default claim's comes from the claim part)
CLAIMS = {"claim_layer.png": "cpu-2026-12-01-claim-layer/claim.json"}
TABLE_START, TABLE_END = " layer ", "ranking:"


def machine() -> dict:
    """The machine and versions a generated number came from."""
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "threads": torch.get_num_threads(), "python": platform.python_version(),
            "torch": torch.__version__, "date": datetime.date.today().isoformat()}


def run(argv: list[str], **paths: Path) -> str:
    """Runs one ``vitplast`` command in this process; returns what it printed (it must succeed)."""
    from vitplast.cli import main

    args = [a.format(**{k: str(v) for k, v in paths.items()}) for a in argv]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(args)
    if code:
        raise SystemExit(f"vitplast {' '.join(args)} failed with exit status {code}:\n{buffer.getvalue()}")
    return buffer.getvalue()


def printed_table(printed: str) -> str:
    """The table lines of ``vitplast measure``'s output, from its header to the ranking."""
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_START))
    end = next(i for i, line in enumerate(lines) if line.startswith(TABLE_END))
    return "\n".join(lines[start:end + 1]) + "\n"


def compare_table(printed: str) -> str:
    """The first table of ``vitplast compare``'s output: the mean over layers per component and run."""
    return printed.strip().split("\n\n", 1)[0] + "\n"


def fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def demo(out: Path, tmp: Path) -> list[str]:
    fresh(out / "demo")
    printed = run(DEMO, out=out, tmp=tmp)
    (out / "demo" / "table.txt").write_text(printed_table(printed))
    return [DEMO]


def compare(out: Path, tmp: Path) -> list[str]:
    run(FINETUNE, out=out, tmp=tmp)
    fresh(out / "finetune").mkdir(parents=True)
    for name in ("curves.png", "plasticity_steps.png"):
        shutil.copy(tmp / "runs" / "mha" / "plots" / name, out / "finetune" / name)
    fresh(out / "after")
    run(AFTER, out=out, tmp=tmp)
    fresh(out / "compare")
    printed = run(COMPARE, out=out, tmp=tmp)
    (out / "compare" / "table.txt").write_text(compare_table(printed))
    return [FINETUNE, AFTER, COMPARE]


def grid(out: Path, tmp: Path) -> list[str]:
    run(GRID, out=out, tmp=tmp)
    fresh(out / "grid").mkdir(parents=True)
    for name in ("accuracy_per_component.png", "plasticity_vs_gain.png"):
        shutil.copy(tmp / "runs" / "grid" / "plots" / name, out / "grid" / name)
    return [GRID]


ARM_FILES = ("claim.txt", "claim.json", "claim.png", "criteria.json", "budgets.png")
AGGREGATE_FILES = ("aggregate.txt", "aggregate.json", "aggregate.png")


def claim(out: Path, tmp: Path) -> list[str]:
    run(CLAIM, out=out, tmp=tmp)
    made, dest = tmp / "runs" / "claim", fresh(out / "claim")
    arms = sorted((made / "datasets").iterdir()) if (made / "datasets").is_dir() else [made]
    for arm in arms:  # one arm: its files in claim/ itself
        folder = dest / arm.name if arm != made else dest
        folder.mkdir(parents=True)
        for name in ARM_FILES:
            if (arm / name).is_file():
                shutil.copy(arm / name, folder / name)
        write_claim_tables(folder)
    for name in AGGREGATE_FILES:
        if (made / name).is_file():
            shutil.copy(made / name, dest / name)
    if (dest / "aggregate.json").is_file():
        (dest / "tables.md").write_text(aggregate_tables(json.loads((dest / "aggregate.json").read_text())))
    return [CLAIM]


def _cell(v, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _with_ci(d: dict | None, fmt: str) -> str:
    if not d or d.get("mean") is None:
        return "n/a"
    lo, hi = d.get("ci") or (None, None)
    return _cell(d["mean"], fmt) + ("" if lo is None or hi is None else f" [{lo:{fmt}}, {hi:{fmt}}]")


def claim_tables(doc: dict) -> str:
    """The claim's analysis (``claim.json``) as Markdown tables that fit a page: the verdict, one row
    per ranked unit and baseline, and the criteria's correlations with the gains."""
    an = doc["analysis"]
    edge = {"low": " (lowest of its grid)", "high": " (highest of its grid)", None: ""}
    lines = [f"**Verdict:** {an['verdict']}", "",
             "| unit | trainable params | plasticity [95% CI] | best lr | accuracy [95% CI] | gain over "
             f"{an['baseline']['train']} [95% CI] |", "|---|---:|---|---|---|---|"]
    for r in an["rows"]:
        lo, hi = r["plasticity_ci"]
        plast = _cell(r["plasticity"], ".3f") + ("" if lo is None else f" [{lo:.3f}, {hi:.3f}]")
        lines.append(f"| {r['unit']} | {r['trainable_params']:,} | {plast} "
                     f"| {r['lr']:.2g}{edge[r['lr_edge']]} | {_with_ci(r['accuracy'], '.3f')} "
                     f"| {_with_ci(r['best_lr_gain'], '+.3f')} |")
    for b in [an["baseline"], *an["baselines"]]:
        lr = "n/a" if b.get("lr") is None else f"{b['lr']:.2g}{edge[b.get('lr_edge')]}"
        params = "n/a" if b.get("trainable_params") is None else f"{b['trainable_params']:,}"
        lines.append(f"| {b['train']} (baseline) | {params} | - | {lr} "
                     f"| {_with_ci(b.get('accuracy'), '.3f')} | {_with_ci(b.get('best_lr_gain'), '+.3f')} |")
    lines += ["", "| criterion | units | Spearman ρ with the gains [95% CI] | Kendall τ | one-sided p "
              "| partial ρ, size fixed |", "|---|---:|---|---:|---:|---:|"]
    for c in an["criteria"]:
        lo, hi = c["spearman_ci"]
        rho = _cell(c["spearman"], "+.2f") + ("" if lo is None else f" [{lo:+.2f}, {hi:+.2f}]")
        lines.append(f"| {c['criterion']} | {c['n']} | {rho} | {_cell(c['kendall'], '+.2f')} "
                     f"| {_cell(c['p_value'], '.3g')} | {_cell(c['partial_size'], '+.2f')} |")
    return "\n".join(lines) + "\n"


def aggregate_tables(doc: dict) -> str:
    """The aggregate over a claim's arms (``aggregate.json``) as Markdown: the verdict, one row per arm,
    the pooled and combined tests, and MHA against each component over the arms' (arm, seed) pairs."""
    from vitplast.claim.aggregate import Aggregate, aggregate_verdict, shared_units_note

    agg = Aggregate.from_json(doc["aggregate"])
    lines = [f"**Verdict over the arms:** {aggregate_verdict(agg)}", "",
             "| arm (data-optimiser) | units | Spearman ρ [95% CI] | one-sided p | Kendall τ |",
             "|---|---:|---|---:|---:|"]
    for name, d in agg.datasets.items():
        sp = d.spearman
        rho = _cell(sp.value, "+.2f") + ("" if sp.ci[0] is None else f" [{sp.ci[0]:+.2f}, {sp.ci[1]:+.2f}]")
        lines.append(f"| {name} | {d.rows} | {rho} "
                     f"| {_cell(sp.p_greater, '.3g')} | {_cell(d.kendall.value, '+.2f')} |")
    pooled, comb = agg.pooled, agg.combined
    lines += ["", f"Pooled within arms: Spearman ρ {_cell(pooled.spearman, '+.2f')}, stratified permutation "
              f"p = {_cell(pooled.p_greater, '.3g')} (one-sided); Stouffer's combination of the arms' p: "
              f"{_cell(comb.p_greater, '.3g')}; ρ > 0 in {comb.datasets_rho_positive} of "
              f"{comb.datasets_rho_defined} arms."]
    if note := shared_units_note(agg):
        lines[-1] += f" ({note[0].upper()}{note[1:]}.)"
    if agg.mha_tests is not None:
        lines += ["", "| MHA vs | pairs | mean accuracy difference | paired t p (Holm) | Wilcoxon p (Holm) |",
                  "|---|---:|---:|---:|---:|"]
        for other, t in agg.mha_tests.comparisons.items():
            lines.append(f"| {other} | {t.n} | {_cell(t.mean_difference, '+.4f')} "
                         f"| {_cell(t.t_p_holm, '.3g')} | {_cell(t.wilcoxon_p_holm, '.3g')} |")
    return "\n".join(lines) + "\n"


def write_claim_tables(folder: Path) -> None:
    """``tables.md`` beside the claim's ``claim.json``, for the claim guide."""
    (folder / "tables.md").write_text(claim_tables(json.loads((folder / "claim.json").read_text())))


def charts(out: Path, tmp: Path) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from vitplast.claim.figure import plot_claim
    from vitplast.claim.records import ClaimAnalysis, Setup

    from bench.compare import plot

    folder = out / "charts"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (raw, title) in CHARTS.items():
        plot(json.loads((MEASURED / raw).read_text())["sections"], folder / name, title)
    gpu = json.loads((MEASURED / "h200-2026-11-30" / "bench_gpu.json").read_text())
    plot({"gpu paired and grouped": {"rows": gpu["rows"]}}, folder / "bench_gpu_paired.png",
         "paired and grouped, one H200, 2026-11-30 (bench.gpu_paired --quick)")
    for name, raw in CLAIMS.items():
        recorded = todays_keys(json.loads((MEASURED / raw).read_text()))
        plot_claim(ClaimAnalysis.from_json(recorded["analysis"]), Setup.of(recorded), folder / name)
    return [f"from bench/measured/{raw}" for raw, _ in CHARTS.values()] + [
        f"from bench/measured/{raw}" for raw in CLAIMS.values()]


def renamed_gains(value):
    """A claim.json recorded before "gain" was named ``best_lr_gain``, with today's key names."""
    if isinstance(value, dict):
        return {(k.replace("gain", "best_lr_gain") if "gain" in k and "best_lr_gain" not in k
                 and "relative" not in k else k): renamed_gains(v) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed_gains(v) for v in value]
    return value


def todays_keys(claim: dict) -> dict:
    """A claim.json recorded before the component and layer claims shared one schema, with today's
    names and the records it lacks null or empty (nothing the figure draws)."""
    claim = renamed_gains(claim)
    an = claim["analysis"]
    row = {"plasticity_per_layer": None, "plasticity_per_layer_ci": None, "pairs": 0, "excluded_pairs": 0,
           "accuracy_per_seed": [], "relative_gain": None, "relative_gain_validated": None}
    an = {"baselines": [], "ranking": {"plasticity": [], "best_lr_gain": []}, "other_measured": {},
          "criteria": [], "verdict": "", "mha_tests": None,
          "relative_gain": {"definition": "", "validated": ""}, **an,
          "rows": [{**row, **r} for r in an["rows"]]}
    return {**claim, "analysis": an}


PARTS = {"demo": demo, "compare": compare, "grid": grid, "claim": claim, "charts": charts}


def main(argv: list[str]) -> int:
    parts = argv or list(PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"docs/generate.py: unknown part {unknown[0]!r}; parts: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    if "compare" in parts and "demo" not in parts and not (OUT / "demo" / "plasticity.json").is_file():
        parts.insert(0, "demo")
    os.chdir(ROOT)
    sources_path = OUT / "SOURCES.json"
    sources = json.loads(sources_path.read_text()) if sources_path.is_file() else {}
    OUT.mkdir(parents=True, exist_ok=True)
    fresh(WORK).mkdir(parents=True)
    for part in parts:
        print(f"docs/generate.py: {part} ...", file=sys.stderr, flush=True)
        commands = PARTS[part](OUT, WORK)
        sources[part] = {"commands": [c if isinstance(c, str) else
                                      "vitplast " + " ".join(a.format(out=OUT, tmp=WORK) for a in c)
                                      for c in commands], **machine()}
    sources_path.write_text(json.dumps(dict(sorted(sources.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
