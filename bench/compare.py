"""The one table of ratios against every peer: ``python -m bench.compare [--device cpu|cuda]``.

Sections (each from its own module of the bench package, imported lazily; a missing one is skipped
with a note):

- ``paired``      (bench/paired.py)     pair_sq_distances vs eager formula, vector_norm, torch.compile
- ``gpu grouped`` (bench/gpu_paired.py) grouped GPU kernels, ``rows(quick)``; cuda only
- ``all pairs``   (bench/all_pairs.py)  all-pairs distances vs cdist / mm, ``rows(device, quick)``
- ``end to end``  (bench/end_to_end.py) forward alone, + capture, naive hooks, the paper's protocol

The machine's floors (read bandwidth on CPU, copy bandwidth on GPU) are measured in the same run and the
machine, torch, triton and package versions are printed and written beside the numbers (``--json``).
Times are medians of one run; on a shared machine read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .harness import (
    ALLOCATORS,
    copy_bandwidth,
    load_warning,
    machine_info,
    machine_line,
    print_table,
    read_bandwidth,
    set_allocator,
    write_json,
)

SECTIONS = ("paired", "gpu grouped", "all pairs", "end to end")
DEFAULT_COLUMNS_SKIP = ("times",)


def _load(module: str):
    """The section's module of this package, or None (with a printed note) when it is not in this
    checkout."""
    name = f"{__package__}.{module}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        print(f"\n## ({module}.py not present: section skipped)", flush=True)
        return None


def _auto_columns(rows: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys and k not in DEFAULT_COLUMNS_SKIP]
    return [(k, k, None) for k in keys]


def _section(mod, rows: list[dict[str, Any]], title: str, note: str | None) -> dict[str, Any]:
    columns = getattr(mod, "COLUMNS", None) or _auto_columns(rows)
    print_table(title, rows, columns, note)
    return {"rows": rows, "note": note}


def run_sections(args: argparse.Namespace, floors: dict[str, float]) -> dict[str, Any]:
    device = args.device
    floor_name = "copy bandwidth" if device == "cuda" else "read bandwidth"
    results: dict[str, Any] = {}
    wanted = args.sections or list(SECTIONS)

    if "paired" in wanted and (mod := _load("paired")) is not None:
        t0 = time.perf_counter()
        rows = mod.rows(device, quick=args.quick, compile_peer=not args.no_compile)
        note = (f"pair_sq_distances (auto backend) on {device}; x peer = median over interleaved rounds of "
                f"peer time / our time (each sample after an untimed call of the same function); MB read = "
                f"both inputs once; % floor = median over the same rounds of our GB/s / {floor_name} (inputs "
                f"under the cache size may exceed 100%); err = max relative error of distances vs float64 "
                f"({time.perf_counter() - t0:.0f} s)")
        results["paired"] = _section(mod, rows, "paired: one distance per pair", note)

    if "gpu grouped" in wanted:
        if device != "cuda":
            print("\n## (gpu grouped: cuda only, skipped on cpu)")
        elif (mod := _load("gpu_paired")) is not None:
            rows = mod.rows(args.quick)
            results["gpu grouped"] = _section(mod, rows, "gpu grouped", getattr(mod, "NOTE", None))

    if "all pairs" in wanted and (mod := _load("all_pairs")) is not None:
        rows = mod.rows(device, args.quick)
        results["all pairs"] = _section(mod, rows, "all pairs", getattr(mod, "NOTE", None))

    if "end to end" in wanted and (mod := _load("end_to_end")) is not None:
        rows, note = mod.rows(device, args.quick)
        results["end to end"] = _section(mod, rows, "end to end on a timm ViT", note)
    return results


def plot(results: dict[str, Any], path: str | os.PathLike, title: str) -> None:
    """One bar chart per section holding ``x_*`` speedup columns (log scale, 1x line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for name, sec in results.items():
        keys = sorted({k for r in sec["rows"] for k in r if k.startswith("x_")})
        if keys:
            panels.append((name, sec["rows"], keys))
    if not panels:
        print("(nothing to plot: no speedup columns)")
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.6 * len(panels)), squeeze=False)
    for ax, (name, rows, keys) in zip(axes[:, 0], panels, strict=True):
        label_keys = ("case", "model", "shape", "N x K", "batch", "dtype", "method", "label", "config")
        labels = [" ".join(str(r[k]) for k in label_keys if k in r) or str(i) for i, r in enumerate(rows)]
        width = 0.8 / len(keys)
        for j, k in enumerate(keys):
            ax.bar([i + j * width for i in range(len(rows))], [r.get(k) or 0 for r in rows], width,
                   label=k.removeprefix("x_"))
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], labels, rotation=20, fontsize=8)
        ax.set_ylabel("speedup of ours (x)")
        ax.set_title(name)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", metavar="PATH", help="write machine, floors and every row as JSON (atomic)")
    p.add_argument("--plot", metavar="PATH", help="write a bar chart of the speedups (PNG)")
    p.add_argument("--quick", action="store_true", help="fewer shapes and shorter timing (a smoke run)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, metavar="SECTION",
                   help=f"run only these sections (default all: {', '.join(SECTIONS)})")
    p.add_argument("--threads", type=int, help="torch (and OpenMP) threads; default: torch's choice")
    p.add_argument("--allocator", choices=ALLOCATORS, default="pinned",
                   help="pinned (default): glibc malloc with a fixed mmap threshold and no trimming, so "
                        "that eager CPU timings are not page-fault noise (bench.harness.pin_allocator)")
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile peer")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    info = machine_info(args.device)
    info["allocator"] = set_allocator(args.allocator)
    print(f"# python -m bench.compare --device {args.device}{' --quick' if args.quick else ''}")
    print(f"# machine: {machine_line(info)}")
    print(f"# {info['allocator']}")
    if args.device == "cpu" and (warning := load_warning(info)):
        print(f"# {warning}")
        info["warning"] = warning
    floors = {"read_Bps": read_bandwidth(args.device)}
    if args.device == "cuda":
        floors["copy_Bps"] = copy_bandwidth(args.device)
    print("# floors: " + ", ".join(f"{k.removesuffix('_Bps')} {v / 1e9:.1f} GB/s" for k, v in floors.items()),
          flush=True)
    results = run_sections(args, floors)
    elapsed = time.perf_counter() - t0
    print(f"\n# total {elapsed:.0f} s")
    record = {"command": " ".join(["python -m bench.compare", *(argv if argv is not None else sys.argv[1:])]),
              "machine": info, "floors": floors, "elapsed_s": elapsed, "sections": results}
    if args.json:
        print(f"# wrote {write_json(args.json, record)}")
    if args.plot:
        plot(results, args.plot, machine_line(info))
        print(f"# wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
