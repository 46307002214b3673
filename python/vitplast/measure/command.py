"""Measure the plasticity of every component (LN1, MHA, LN2, FC1, FC2) of every block of a model.

With no arguments: the embedded default, a small timm ViT pretrained by this package on scikit-learn's
digits 0-4 (one-time CPU pretraining, cached), measured with matched pairs X = digits 0-4 (pretraining
classes) and Y = digits 5-9 (unseen classes): the paper's pretraining-vs-downstream pairing in
miniature. Otherwise: any timm model (--model, --weights) on an ImageFolder (--data), pairs drawn
within one batch (--pairs halves: image i with i + B/2) or across two datasets (--pair-data: X from
--data, Y from --pair-data; each batch is half X, half Y, X[i] paired with Y[i]). Models without a
preset (Swin, ResNets, ...) are measured by naming their components with --component.

rate(x, y) = ||f(x) - f(y)||_F / ||x - y||_F per pair; plasticity = mean rate (per component and layer).
The table prints mean ± 95% CI half-width per layer; "pairs used" sums the pairs over layers.

examples:
  vitplast measure
  vitplast measure --model vit_small_patch16_224 --weights vit_s.safetensors --data imgs/ --out res/
  vitplast measure --model vit_base_patch16_224 --weights w.npz --data in1k_val/ --pair-data cars/ \\
      --protocol decomposition --device cuda --dtype bf16
  vitplast measure --weights runs/c10/MHA_lr0.001_seed0        # a vitplast finetune run directory
  vitplast measure --model swin_tiny_patch4_window7_224 --data imgs/ \\
      --component 'LN1=layers.*.blocks.*.norm1' --component 'MHA=layers.*.blocks.*.attn' \\
      --component 'LN2=layers.*.blocks.*.norm2' --component 'FC1=layers.*.blocks.*.mlp.fc1' \\
      --component 'FC2=layers.*.blocks.*.mlp.fc2'
"""

from __future__ import annotations

import argparse

from ..common import arg_types as T
from ..common.model_builder import DIGITS_MODEL
from .run import DEFAULT_DATA, DEFAULT_PAIR_DATA, PAIRS, PROTOCOLS, measure

__all__ = ["add_arguments", "measure", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vitplast measure``."""
    T.setup_parser(parser)
    a = parser.add_argument
    a("--model", default=None,
      help=f"timm model name, or {DIGITS_MODEL!r}; default: the architecture of the finetune run that wrote "
           f"--weights, else {DIGITS_MODEL} (the embedded ViT pretrained here on digits 0-4)")
    a("--weights", default=None, metavar="PATH",
      help="local checkpoint (.safetensors / .pth / .npz) or a vitplast finetune run directory; without it "
           "a --model is random init (warns)")
    a("--allow-partial-weights", action="store_true",
      help="load a checkpoint that leaves more than the classifier head at random init, or holds tensors "
           "the model does not have (by default an error)")
    a("--data", default=None, metavar="SPEC",
      help="ImageFolder DIR, or a spec of load_dataset ('digits:0-4', 'cifar10:DIR', ...); "
           f"default {DEFAULT_DATA!r} with --pair-data {DEFAULT_PAIR_DATA!r}")
    a("--pair-data", default=None, metavar="SPEC",
      help="matched cross-domain pairs: X from --data, Y from here (same spec forms as --data)")
    a("--skip-bad-images", action="store_true",
      help="skip (and count) image files that cannot be decoded instead of stopping with an error")
    a("--split", default="all", choices=("train", "val", "all"), help="dataset split")
    a("--protocol", default="in_situ", choices=PROTOCOLS,
      help="in_situ: real forward, each component sees its real input; decomposition: every component "
           "applied to the embedding output (the paper's protocol)")
    a("--pairs", default="halves", choices=PAIRS,
      help="halves: image i with i + B/2 of each batch of B images; all: every distinct pair of the B "
           "images (with --pair-data, X-X and Y-Y pairs too)")
    a("--component", action="append", type=T.component, metavar="LABEL=GLOB", dest="components",
      help="a component to measure, as a glob over module names ('*' = the layer index, '**' = any "
           "prefix, '?' and '[...]' inside a name); repeatable (a label given twice is made of both "
           "modules); replaces the presets")
    a("--embedding", default=None, metavar="NAME",
      help="--protocol decomposition: the module whose output is e, or 'NAME:input' for its input "
           "(default: the preset's)")
    a("--batches", type=T.positive_int, default=4, help="forward passes to accumulate")
    a("--batch-size", type=T.batch_size, default=128,
      help="images per forward pass (B: B/2 pairs with halves or --pair-data, B(B-1)/2 with --pairs all)")
    a("--device", type=T.device, default="cpu", help="auto (cuda when available), cpu, cuda, cuda:1, ...")
    a("--dtype", type=T.dtype, default="float32", choices=T.DTYPES,
      help="autocast dtype (float32: no autocast; bf16/fp16/fp32 accepted)")
    a("--img-size", type=T.positive_int, default=None,
      help="image size (default: the model's own; 32 for the digits ViT)")
    a("--seed", type=T.seed, default=0, help="data order, random initialisation and digits pretraining seed")
    a("--out", default=None, metavar="DIR",
      help="write plasticity.json, plasticity.png and run.json here, as one set (a new directory, or one "
           "a previous measure wrote; checked before measuring)")
    a("--cache-dir", default=None, metavar="DIR",
      help="where the digits ViT is cached (default $VITPLAST_CACHE or ~/.cache/vitplast)")
    a("--pretrain-config", type=T.json_object, default=None, metavar="JSON",
      help="overrides of the digits ViT's DigitsConfig, e.g. '{\"epochs\": 5}' (a new cache entry)")
    a("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vitplast measure``; returns the exit status (2 for any input error)."""
    try:
        measure(model=args.model, weights=args.weights, data=args.data, pair_data=args.pair_data,
                protocol=args.protocol, pairs=args.pairs, batches=args.batches, batch_size=args.batch_size,
                device=args.device, dtype=args.dtype, img_size=args.img_size, seed=args.seed,
                split=args.split, out=args.out, cache_dir=args.cache_dir,
                pretrain_config=args.pretrain_config, progress=not args.no_progress,
                components=T.components(args.components), embedding=args.embedding,
                allow_partial_weights=args.allow_partial_weights, skip_bad_images=args.skip_bad_images)
    except (ValueError, OSError) as exc:  # bad input or a file that cannot be read or written
        return T.fail("vitplast measure", exc)
    return 0
