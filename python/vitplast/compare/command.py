"""``vitplast compare`` on the command line: `HELP`, `add_arguments`, `run`; the work is
`vitplast.compare.compare`."""

from __future__ import annotations

import argparse

from ..options.fields import add_options, resolve, values_of
from ..options.parsing import setup_parser
from .options import CompareOptions
from .run import compare

__all__ = ["HELP", "add_arguments", "run"]

HELP = """\
Compare the plasticity of two or more measurements: the same model before and after finetuning, or on
two datasets.

Each RUN is a plasticity.json, or a directory holding one (what vitplast measure --out writes, and what
the Lightning and Hugging Face callbacks write at the end of training). Prints, per component, each
run's plasticity (the mean over layers, then per layer) with its 95% CI and its difference from the
first run; --out DIR also receives compare.txt, compare.csv (one row per run, component and layer),
compare.json and compare.png (one panel per component, one line style per run).

examples:
  vitplast measure --out before
  vitplast finetune --train FC1 --out runs/fc1
  vitplast measure --weights runs/fc1 --out after
  vitplast compare before after --out compare
  vitplast compare in1k/plasticity.json cars/plasticity.json --labels ImageNet,Cars
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    setup_parser(parser)
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="a plasticity.json, or a directory holding one; the first is the reference")
    add_options(parser, CompareOptions)


def run(args: argparse.Namespace) -> int:
    compare(resolve(CompareOptions, {**values_of(args, CompareOptions), "runs": args.runs}))
    return 0
