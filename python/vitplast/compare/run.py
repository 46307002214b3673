"""``compare(...)``: the work of ``vitplast compare`` (its options: `CompareOptions`).

Order of work: the options are checked, then ``out`` (it must be able to receive the output set), then
every run is read; the table is printed and, with ``out``, ``compare.txt``, ``compare.csv``,
``compare.json`` and ``compare.png`` are written as one set (`vitplast.runs.output_set`).
"""

from __future__ import annotations

import json
from typing import Any

from vitplast_kernels.atomic_io import atomic_write_csv

from ..options.fields import options_for
from ..outputs.reporter import Reporter
from ..runs.output_set import OutputSet
from .measurements import load_measurements
from .options import CompareOptions
from .plots import plot_comparison
from .table import Comparison, compare_measurements, format_comparison

OUTPUT_FILES = ("compare.txt", "compare.csv", "compare.json", "compare.png")


def compare(opts: CompareOptions | None = None, /, *, reporter: Reporter | None = None,
            **keywords: Any) -> Comparison:
    """Compares the plasticity of two or more saved measurements; returns the `Comparison`.

    ``opts``: a `CompareOptions`, or its fields as keywords, e.g. ``compare(runs=["before/", "after/"],
    labels=["before", "after"], out="cmp/")``. ``runs``: ``plasticity.json`` files or directories holding one
    (``vitplast measure --out``, the trainer callbacks); the first is the reference of the differences.
    ``reporter``: where the table goes (default: printed).
    """
    opts = options_for(CompareOptions, opts, keywords)
    out_set = None if opts.out is None else OutputSet(opts.out, OUTPUT_FILES)
    if out_set is not None:
        out_set.check()
    cmp = compare_measurements(load_measurements(opts.runs, opts.labels), opts.components)
    say = (reporter or Reporter()).say
    say(text := format_comparison(cmp))
    if out_set is not None:
        write_comparison(out_set, cmp, text)
        say(f"wrote {', '.join(str(out_set.target / f) for f in OUTPUT_FILES)}")
    return cmp


def write_comparison(out_set, cmp: Comparison, text: str) -> None:
    """The table, the tidy CSV (one row per run, component and layer), the JSON and the figure."""
    with out_set.writing() as tmp:
        (tmp / "compare.txt").write_text(text + "\n")
        atomic_write_csv(tmp / "compare.csv", cmp.records())
        (tmp / "compare.json").write_text(json.dumps(cmp.to_dict(), indent=1, allow_nan=False) + "\n")
        plot_comparison(cmp, tmp / "compare.png")
