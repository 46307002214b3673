"""Measure the plasticity of every component (LN1, MHA, LN2, FC1, FC2) of every block of a model.

With no arguments: the embedded default, a small timm ViT pretrained by this package on scikit-learn's
digits 0-4 (one-time CPU pretraining, cached), measured with matched pairs X = digits 0-4 (pretraining
classes) and Y = digits 5-9 (unseen classes): the paper's pretraining-vs-downstream pairing in
miniature. Otherwise: any timm model (--model, --weights) on an ImageFolder (--data), pairs drawn
within one batch (--pairs halves: sequence i with i + B) or across two datasets (--pair-data: X from
--data, Y from --pair-data; the batch is cat([X, Y]) with the halves pairing).

rate(x, y) = ||f(x) - f(y)||_F / ||x - y||_F per pair; plasticity = mean rate (per component and layer).

examples:
  vitplast measure
  vitplast measure --model vit_small_patch16_224 --weights vit_s.safetensors --data imgs/ --out res/
  vitplast measure --model vit_base_patch16_224 --weights w.npz --data in1k_val/ --pair-data cars/ \\
      --protocol decomposition --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path

PROTOCOLS = ("in_situ", "decomposition")
PAIRS = ("halves", "all")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # torch dtype names
DIGITS_MODEL = "digits-vit"  # same name as `vitplast finetune --model`
DEFAULT_DATA = "digits:0-4"
DEFAULT_PAIR_DATA = "digits:5-9"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vitplast measure``."""
    a = parser.add_argument
    a("--model", default=None,
      help=f"timm model name, or {DIGITS_MODEL!r} (the default: the embedded ViT pretrained here on "
           "digits 0-4)")
    a("--weights", default=None, metavar="PATH",
      help="local checkpoint (.safetensors / .pth / .npz); without it a --model is random init (warns)")
    a("--data", default=None, metavar="SPEC",
      help="ImageFolder DIR, or a spec of vitplast.data.load_dataset ('digits:0-4', 'cifar10:DIR', ...); "
           f"default {DEFAULT_DATA!r} with --pair-data {DEFAULT_PAIR_DATA!r}")
    a("--pair-data", default=None, metavar="SPEC",
      help="matched cross-domain pairs: X from --data, Y from here (same spec forms as --data)")
    a("--split", default="all", choices=("train", "val", "all"), help="dataset split (default: all)")
    a("--protocol", default="in_situ", choices=PROTOCOLS,
      help="in_situ: real forward, each component sees its real input; decomposition: every component "
           "applied to the embedding output (the paper's protocol)")
    a("--pairs", default="halves", choices=PAIRS,
      help="halves: image i with i + B of each batch of 2B (default); all: every distinct pair of the 2B "
           "images (with --pair-data, X-X and Y-Y pairs too)")
    a("--batches", type=int, default=4, help="forward passes to accumulate (default 4)")
    a("--batch-size", type=int, default=64, help="pairs per forward pass; each forward sees 2x as many "
                                                 "images (default 64)")
    a("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    a("--dtype", default="fp32", choices=tuple(DTYPES), help="autocast dtype (default fp32: no autocast)")
    a("--img-size", type=int, default=None,
      help="image size (default: the model's own; 32 for the digits ViT)")
    a("--seed", type=int, default=0, help="data order and digits pretraining seed (default 0)")
    a("--out", default=None, metavar="DIR", help="write plasticity.json and plasticity.png here")
    a("--cache-dir", default=None, metavar="DIR",
      help="where the digits ViT is cached (default $VITPLAST_CACHE or ~/.cache/vitplast)")
    a("--pretrain-config", default=None, metavar="JSON",
      help="overrides of the digits ViT's DigitsConfig, e.g. '{\"epochs\": 5}' (a new cache entry)")
    a("--no-progress", action="store_true", help="no progress bars")


def _default_img_size(model_name: str) -> int:
    import timm

    try:
        cfg = timm.models.get_pretrained_cfg(model_name)
        if cfg is not None and cfg.input_size:
            return int(cfg.input_size[-1])
    except Exception:  # names without a pretrained config
        pass
    return 224


def _model_img_size(model, fallback: int) -> int:
    pe = getattr(model, "patch_embed", None)
    size = getattr(pe, "img_size", None)
    if isinstance(size, (tuple, list)) and size:
        return int(size[-1])
    if isinstance(size, int):
        return size
    return fallback


def _batches(dataset, n_images: int, batches: int, seed: int):
    """Yield up to ``batches`` image tensors (n_images, 3, H, W), shuffled by ``seed``, full batches only."""
    from vitplast.data import make_loader

    loader = make_loader(dataset, batch_size=n_images, shuffle=True, seed=seed, drop_last=True)
    for i, (images, _labels) in enumerate(loader):
        if i >= batches:
            break
        yield images


def _autocast(device, dtype_name: str):
    import torch

    dtype = getattr(torch, DTYPES[dtype_name])
    if dtype == torch.float32:
        from contextlib import nullcontext

        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def measure(model: str | None = None, weights: str | None = None, data: str | None = None,
            pair_data: str | None = None, protocol: str = "in_situ", pairs: str = "halves",
            batches: int = 4, batch_size: int = 64, device: str = "cpu", dtype: str = "fp32",
            img_size: int | None = None, seed: int = 0, split: str = "all", out: str | None = None,
            cache_dir: str | None = None, pretrain_config: dict | None = None, progress: bool = True,
            log=print):
    """Measure a model's plasticity; returns the ``vitplast_kernels`` ``PlasticityResult``.

    ``model=None`` -> the embedded digits ViT (``weights`` then loads a checkpoint of that architecture,
    e.g. a finetuned one); ``data=None`` -> ``"digits:0-4"`` matched with ``pair_data="digits:5-9"``.
    Each of the ``batches`` forward passes sees ``2 * batch_size`` images (``batch_size`` pairs).
    ``out``: a directory receiving ``plasticity.json`` and ``plasticity.png``. ``log``: where the
    summary lines go (``None`` for silence).
    """
    import torch
    from tqdm.auto import tqdm

    import vitplast_kernels
    from vitplast.data import load_dataset
    from vitplast.rundir import write_json_atomic

    log = log or (lambda *a, **k: None)
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if pairs not in PAIRS:
        raise ValueError(f"pairs must be one of {PAIRS}, got {pairs!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    for name, v in (("batches", batches), ("batch_size", batch_size)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device {device!r} is not a torch device (cpu, cuda, cuda:1, ...)") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    if data is None:
        data = DEFAULT_DATA
        if pair_data is None:
            pair_data = DEFAULT_PAIR_DATA

    start = time.perf_counter()
    if model == DIGITS_MODEL:
        model = None
    if model is None:
        from vitplast.digits import DigitsConfig, build_digits_vit, checkpoint_info, digits_checkpoint

        fields = {f.name for f in dataclasses.fields(DigitsConfig)}
        unknown = sorted(set(pretrain_config or {}) - fields)
        if unknown:
            raise ValueError(f"pretrain_config: unknown DigitsConfig field(s) {unknown}; "
                             f"known: {sorted(fields)}")
        cfg = DigitsConfig(**(pretrain_config or {}))
        if img_size is not None and img_size != cfg.img_size:
            raise ValueError(f"img_size={img_size}: the digits ViT takes "
                             f"{cfg.img_size}x{cfg.img_size} images")
        img_size = cfg.img_size
        # datasets before the (first-run, ~40 s) pretraining: a bad --data/--pair-data fails at once
        x_set = load_dataset(data, split, img_size=img_size, seed=seed)
        y_set = load_dataset(pair_data, split, img_size=img_size, seed=seed) if pair_data else None
        if weights is None:
            path = digits_checkpoint(cache_dir, seed=seed, progress=progress, config=cfg)
            info = checkpoint_info(path)
            net = build_digits_vit(cfg, weights=path)
            model_desc = (f"digits ViT (timm {cfg.model}: img {cfg.img_size}, patch {cfg.patch_size}, "
                          f"dim {cfg.embed_dim}, depth {cfg.depth}), pretrained here on digits {cfg.classes} "
                          f"(val acc {float(info.get('val_acc', 'nan')):.3f}), cached at {path}")
        else:
            net = build_digits_vit(cfg, weights=weights)
            model_desc = f"digits ViT architecture with weights {weights}"
    else:
        from vitplast.models import create_vit

        img_size = img_size or _default_img_size(model)
        n_classes = load_dataset(data, split, img_size=8 if data.startswith("digits") else img_size,
                                 seed=seed).num_classes
        net = create_vit(model, n_classes, img_size=img_size, weights=weights)
        img_size = _model_img_size(net, img_size)
        model_desc = f"{model} ({'weights ' + str(weights) if weights else 'random init'})"

        x_set = load_dataset(data, split, img_size=img_size, seed=seed)
        y_set = load_dataset(pair_data, split, img_size=img_size, seed=seed) if pair_data else None
    net = net.to(dev).eval()
    n_params = sum(p.numel() for p in net.parameters())
    log(f"model: {model_desc}, {n_params / 1e6:.2f} M parameters")
    if y_set is None:
        per = batch_size if pairs == "halves" else batch_size * (2 * batch_size - 1)
        log(f"pairs: {pairs} within {data!r} ({len(x_set)} images), {per} pairs per batch")
        stream = ((xb, None) for xb in _batches(x_set, 2 * batch_size, batches, seed))
        available = len(x_set) // (2 * batch_size)
    else:
        log(f"pairs: matched, X from {data!r} ({len(x_set)} images) with Y from {pair_data!r} "
            f"({len(y_set)} images), {batch_size} pairs per batch")
        stream = zip(_batches(x_set, batch_size, batches, seed),
                     _batches(y_set, batch_size, batches, seed + 1), strict=False)
        available = min(len(x_set), len(y_set)) // batch_size
    if available < 1:
        raise ValueError(f"batch_size={batch_size}: the data holds too few images for one batch "
                         f"({len(x_set)}{'' if y_set is None else f' / {len(y_set)}'})")
    if available < batches:
        warnings.warn(f"batches={batches}: the data holds only {available} full batches of "
                      f"{batch_size} pairs; measuring {available}", stacklevel=2)
    n_run = min(batches, available)

    with vitplast_kernels.capture(net, protocol=protocol, pairs=pairs) as acts:
        with torch.no_grad(), _autocast(dev, dtype):
            for xb, yb in tqdm(stream, total=n_run, desc=f"measuring ({protocol})", disable=not progress,
                               unit="batch"):
                batch = xb if yb is None else torch.cat([xb, yb])
                net(batch.to(dev, non_blocking=True))
    res = vitplast_kernels.pairwise_plasticity(acts)
    elapsed = time.perf_counter() - start

    log(res.table())  # ends with the ranking line
    log(f"({n_run} batches x {batch_size} pairs, {protocol}, {dtype} on {dev}, {elapsed:.1f} s)")
    if out is not None:
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        res.to_json(out_dir / "plasticity.json")
        res.plot(out_dir / "plasticity.png")
        write_json_atomic(out_dir / "run.json", dict(
            model=model or "digits-vit", weights=weights, data=data, pair_data=pair_data, protocol=protocol,
            pairs=pairs, batches=n_run, batch_size=batch_size, device=str(dev), dtype=dtype,
            img_size=img_size, seed=seed, split=split, seconds=round(elapsed, 3), model_desc=model_desc))
        log(f"wrote {out_dir / 'plasticity.json'}, {out_dir / 'plasticity.png'}, {out_dir / 'run.json'}")
    return res


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vitplast measure``; returns the exit status."""
    pretrain_config = None
    if args.pretrain_config:
        try:
            pretrain_config = json.loads(args.pretrain_config)
        except json.JSONDecodeError as exc:
            print(f"vitplast measure: --pretrain-config is not valid JSON: {exc}", file=sys.stderr)
            return 2
    try:
        measure(model=args.model, weights=args.weights, data=args.data, pair_data=args.pair_data,
                protocol=args.protocol, pairs=args.pairs, batches=args.batches, batch_size=args.batch_size,
                device=args.device, dtype=args.dtype, img_size=args.img_size, seed=args.seed,
                split=args.split, out=args.out, cache_dir=args.cache_dir, pretrain_config=pretrain_config,
                progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as exc:
        print(f"vitplast measure: error: {exc}", file=sys.stderr)
        return 2
    return 0
