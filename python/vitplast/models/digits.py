"""The embedded default model: a small timm ViT pretrained by this package on digits 0-4, on CPU.

No weights can be downloaded where this package runs, yet measuring a random-init ViT is misleading
(random-init ViTs rank components almost opposite to pretrained ones). So the default model is trained
here, once: a timm VisionTransformer (``vit_tiny_patch16_224`` architecture resized: 32x32 images,
8x8 patches = 16 tokens + CLS, width 64, depth 4, 2 heads, MLP ratio 4) trained on scikit-learn's
digits 0-4 (the "pretraining" classes; digits 5-9 play the downstream data) with AdamW, a cosine
schedule, label smoothing and random affine augmentation. Its validation accuracy is stored with the
checkpoint (`checkpoint_info`) and shown in the model's description.

Why ``epochs`` goes well past the point where the validation accuracy stops improving: the ranking of
the components keeps moving with training. At init the LayerNorms rank first and attention last; only
with longer training do the non-smooth components (FC1, FC2, MHA) end above the LayerNorms, as on
pretrained ViTs. This toy model ranks FC1 and FC2 above MHA, where the paper finds MHA first.

The default model (``DigitsConfig()``, seed 0) ships with the package (``models/shipped/``, 0.21 M
parameters, under 1 MB, its sha256 in `SHIPPED`): it is used as it is, the cache is not consulted
and nothing is pretrained, so every machine measures the same model. Any other config or seed is
pretrained on first use and cached.

The checkpoint is cached as ``<cache>/digits_vit-<hash>.safetensors``, where ``<cache>`` is
``cache_dir``, else ``$VITPLAST_CACHE``, else ``~/.cache/vitplast``, and ``<hash>`` covers the whole
``DigitsConfig`` and the seed. It is written atomically (temporary file + rename), so concurrent or
killed runs never leave a partial file. Training is reproducible from the seed (same machine, same
thread count: bitwise; elsewhere up to float rounding).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import stat
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from vitplast.data.datasets import load_dataset
from vitplast.data.images import file_kind
from vitplast.data.transforms import ImageTransform
from vitplast.outputs.json_files import loads_named
from vitplast.outputs.paths import check_out_dir
from vitplast_kernels.atomic_io import atomic_write

from .built import BuildRequest, BuiltModel
from .digits_vit import DigitsConfig, build_digits_vit, check_digits_options, digits_config
from .sources import DIGITS_MODEL

if TYPE_CHECKING:
    from .sources import ModelPlan


SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
# the shipped default checkpoint: the (config, seed) key it was made for, its sha256, its val accuracy
SHIPPED = {"key": "d615fdcaad975756", "seed": 0,
           "sha256": "5d9ce3c35b83e56a6339c62aa1b21dbca2ce4a501ef337293d3be78b01474e20",
           "bytes": 860836, "val_acc": 0.988889}
_SHIPPED_CHECKED: set[Path] = set()


def shipped_checkpoint(config: DigitsConfig | None = None, seed: int = 0) -> Path | None:
    """The checkpoint shipped with the package for ``(config, seed)``, hash-checked once per process;
    ``None`` for every other config and seed. A shipped file whose sha256 differs from `SHIPPED`
    (a damaged install) raises ``ValueError`` naming the file."""
    cfg = config or DigitsConfig()
    if seed != SHIPPED["seed"] or cfg.key(seed) != SHIPPED["key"]:
        return None
    path = SHIPPED_DIR / f"digits_vit-{SHIPPED['key']}.safetensors"
    if path not in _SHIPPED_CHECKED:
        try:
            data = _read_shipped(path, SHIPPED["bytes"])
        except OSError as exc:
            raise ValueError(f"{path}: the shipped digits ViT cannot be read ({exc.strerror}); "
                             "reinstall vitplast-kernels") from exc
        digest = hashlib.sha256(data).hexdigest()
        if digest != SHIPPED["sha256"]:
            raise ValueError(f"{path}: the shipped digits ViT is damaged (sha256 {digest[:12]}..., "
                             f"expected {SHIPPED['sha256'][:12]}...); reinstall vitplast-kernels")
        _SHIPPED_CHECKED.add(path)
    return path


def _read_shipped(path: Path, size: int) -> bytes:
    """The bytes of the shipped checkpoint at ``path``, which must be a regular file (a link to one is
    followed) of ``size`` bytes: a directory, FIFO, socket or device in its place is never read (a FIFO
    would block, a device never end), nor more than ``size`` + 1 bytes of any file. ValueError naming
    the file and what it is otherwise; OSError when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(mode := os.fstat(fd).st_mode):
            raise ValueError(f"{path}: the shipped digits ViT is not a regular file ({file_kind(mode)}), so "
                             "it is not read; reinstall vitplast-kernels")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        data = f.read(size + 1)
    if len(data) != size:
        found = f"more than {size}" if len(data) > size else str(len(data))
        raise ValueError(f"{path}: the shipped digits ViT is damaged ({found} bytes, expected {size}); "
                         "reinstall vitplast-kernels")
    return data


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$VITPLAST_CACHE``, else ``~/.cache/vitplast``."""
    if cache_dir is None:
        cache_dir = os.environ.get("VITPLAST_CACHE") or Path.home() / ".cache" / "vitplast"
    return Path(cache_dir)


def check_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache directory (`cache_root`), checked before any pretraining: a directory this process
    can write into, or one it can create (ValueError naming ``--cache-dir`` otherwise)."""
    return check_out_dir(cache_root(cache_dir), "--cache-dir" if cache_dir is not None else "the cache")


def _augment(x: torch.Tensor, cfg: DigitsConfig, g: torch.Generator) -> torch.Tensor:
    """Random rotation / scale / shift of ``x`` (b, 3, H, W) through one batched ``grid_sample``."""
    b = x.shape[0]
    angle = (torch.rand(b, generator=g) * 2 - 1) * math.radians(cfg.max_rotate_deg)
    scale = 1 + (torch.rand(b, generator=g) * 2 - 1) * cfg.max_scale
    shift = (torch.rand(b, 2, generator=g) * 2 - 1) * cfg.max_shift
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1),
                         torch.stack([sin, cos, shift[:, 1]], 1)], 1)  # (b, 2, 3)
    grid = nn.functional.affine_grid(theta, list(x.shape), align_corners=False)
    return nn.functional.grid_sample(x, grid, padding_mode="border", align_corners=False)


@torch.no_grad()
def digits_accuracy(model: nn.Module, dataset, batch_size: int = 256) -> float:
    """Top-1 accuracy of ``model`` on an in-memory dataset (``.images``, ``.labels``)."""
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(dataset), batch_size):
        logits = model(dataset.images[i:i + batch_size])
        correct += int((logits.argmax(-1) == dataset.labels[i:i + batch_size]).sum())
    model.train(was_training)
    return correct / max(len(dataset), 1)


def pretrain(config: DigitsConfig, seed: int = 0, progress: bool = True) -> tuple[nn.Module, dict]:
    """Train the digits ViT from scratch on ``digits:<config.classes>`` (train split) on CPU.

    Returns ``(model in eval mode, info)``, ``info`` holding ``val_acc`` (on the val split), ``seconds``.
    Uses its own RNG streams (the caller's global RNG state is restored afterwards) and one intra-op
    thread (restored afterwards): the matrices are too small for more threads to pay, and on a shared
    machine extra threads mostly wait for each other.
    """
    from tqdm.auto import tqdm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        train, val = (load_dataset(f"digits:{config.classes}", split, img_size=config.img_size, seed=seed)
                      for split in ("train", "val"))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = build_digits_vit(config, num_classes=train.num_classes).train()
        g = torch.Generator().manual_seed(seed + 1)
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        steps_per_epoch = math.ceil(len(train) / config.batch_size)
        total = config.epochs * steps_per_epoch
        warmup = config.warmup_epochs * steps_per_epoch

        def lr_at(step: int) -> float:
            if step < warmup:
                return config.lr * (step + 1) / warmup
            t = (step - warmup) / max(total - warmup, 1)
            return config.lr * 0.5 * (1 + math.cos(math.pi * t))

        loss_fn = nn.CrossEntropyLoss(label_smoothing=config.label_smoothing)
        bar = tqdm(range(config.epochs), desc="pretraining digits ViT (one time)", disable=not progress,
                   unit="epoch")
        step = 0
        for _ in bar:
            order = torch.randperm(len(train), generator=g)
            for i in range(0, len(train), config.batch_size):
                idx = order[i:i + config.batch_size]
                x = _augment(train.images[idx], config, g)
                for group in opt.param_groups:
                    group["lr"] = lr_at(step)
                loss = loss_fn(model(x), train.labels[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
            bar.set_postfix(loss=f"{loss.item():.3f}")
        model.eval()
        info = {"val_acc": digits_accuracy(model, val), "seconds": time.perf_counter() - start,
                "train_images": len(train), "val_images": len(val)}
        if progress:
            print(f"digits ViT: val accuracy {info['val_acc']:.3f} on digits {config.classes} "
                  f"({info['seconds']:.0f} s)", flush=True)
        return model, info
    finally:
        torch.set_num_threads(threads)


METADATA_KEY = "__metadata__"  # where a safetensors header keeps the file's metadata


def safetensors_bytes(state: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """``state`` and ``metadata`` in the safetensors format, the same bytes for the same contents:
    safetensors writes its metadata in an arbitrary order (a hash map), so the header is written again
    with the metadata sorted (the tensors' entries and data as safetensors lays them out)."""
    from safetensors.torch import save

    blob = save(state, metadata=metadata)
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + size])
    header[METADATA_KEY] = dict(sorted(header.get(METADATA_KEY, {}).items()))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return len(text).to_bytes(8, "little") + text + blob[8 + size:]


def digits_checkpoint(cache_dir: str | os.PathLike | None = None, seed: int = 0, progress: bool = True,
                      config: DigitsConfig | None = None) -> Path:
    """Path of the pretrained checkpoint (``.safetensors``): the shipped one for the default config and
    seed (`shipped_checkpoint`), else the cached one, pretraining it first if absent."""
    cfg = config or DigitsConfig()
    if (shipped := shipped_checkpoint(cfg, seed)) is not None:
        return shipped
    path = cache_root(cache_dir) / f"digits_vit-{cfg.key(seed)}.safetensors"
    if path.is_file():
        return path
    print(f"pretraining the digits ViT once, about {pretrain_seconds_estimate(cfg):.0f} s; cached in "
          f"{path.parent}", file=sys.stderr, flush=True)  # on any stream: a first run is slower
    model, info = pretrain(cfg, seed=seed, progress=progress)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    data = safetensors_bytes(state, checkpoint_metadata(cfg, seed, info))
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
    return path


def checkpoint_metadata(cfg: DigitsConfig, seed: int, info: dict) -> dict[str, str]:
    """What a pretrained checkpoint's file records: its config, seed, validation accuracy and torch
    version; nothing of the clock or the machine, so that two pretrainings of one (config, seed) on one
    machine write byte-identical files (one sha256)."""
    return {"config": json.dumps(dataclasses.asdict(cfg), sort_keys=True), "seed": str(seed),
            "val_acc": f"{info['val_acc']:.6f}", "torch": torch.__version__}


# the cost model of `pretrain_seconds_estimate`, fitted on a 2-core VM (one thread): a fixed cost per
# block and step (small matrices: kernel launches dominate), a cost per multiply-add, and the set-up
STEP_BLOCK_S, MAC_S, SETUP_S = 0.02, 1.0e-10, 1.0


def pretrain_seconds_estimate(cfg: DigitsConfig) -> float:
    """Roughly how long `pretrain` takes for ``cfg`` on one CPU thread (the cost model above: within a
    factor of about two, more on a loaded machine)."""
    images = len(load_dataset(f"digits:{cfg.classes}", "train", img_size=cfg.img_size))
    steps = cfg.epochs * math.ceil(images / cfg.batch_size)
    tokens = (cfg.img_size // cfg.patch_size) ** 2 + 1
    block_macs = tokens * cfg.embed_dim ** 2 * (4 + 2 * cfg.mlp_ratio) + 2 * tokens ** 2 * cfg.embed_dim
    macs = 3 * block_macs * cfg.depth * cfg.batch_size  # forward and backward, per step
    return SETUP_S + steps * (cfg.depth * STEP_BLOCK_S + macs * MAC_S)


def checkpoint_info(path: str | os.PathLike) -> dict:
    """The metadata stored with a cached checkpoint (config, seed, val_acc, torch)."""
    from safetensors import safe_open

    with safe_open(os.fspath(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
    if "config" in meta:
        meta["config"] = loads_named(meta["config"], f"{path} (its metadata's config)")
    return meta


def pretrained_digits_vit(cache_dir: str | os.PathLike | None = None, seed: int = 0, progress: bool = True,
                          config: DigitsConfig | None = None) -> nn.Module:
    """The embedded default model: the digits ViT pretrained on digits 0-4, in eval mode, float32, CPU.

    The default config and seed load the shipped checkpoint; others pretrain once and cache it (see the
    module docstring); later calls only load it.
    Inputs are images ``(N, 3, 32, 32)`` float32 as given by
    ``vitplast.data.datasets.load_dataset("digits...", img_size=32)``.
    """
    cfg = config or DigitsConfig()
    path = digits_checkpoint(cache_dir, seed=seed, progress=progress, config=cfg)
    try:
        return build_digits_vit(cfg, weights=path)
    except Exception as exc:  # unreadable cache file (e.g. written by an incompatible version): redo
        if path.parent == SHIPPED_DIR:
            raise
        warnings.warn(f"cached digits ViT {path} unreadable ({exc}); pretraining again", stacklevel=2)
        path.unlink(missing_ok=True)
        return build_digits_vit(cfg, weights=digits_checkpoint(cache_dir, seed, progress, cfg))


def build_digits(plan: ModelPlan, request: BuildRequest) -> BuiltModel:
    """The digits family's `BuiltModel`: without ``plan.weights`` the digits ViT pretrained here (the
    shipped or cached checkpoint; pretrained first when absent), with them (which the builder loads)
    or with ``plan.random_init`` that architecture at random init. Its head keeps the pretraining
    classes; images are scaled to [-1, 1] (mean and std 0.5 of images in [0, 1])."""
    check_digits_options(plan.model_kwargs, plan.img_size, request.pretrain_config)
    cfg = digits_config(request.pretrain_config)
    if plan.weights is not None:
        net = build_digits_vit(cfg)
        desc, origin = f"digits ViT architecture with weights {plan.weights}", {"kind": "weights",
                                                                              "file": str(plan.weights)}
    elif plan.random_init:
        net, desc, origin = build_digits_vit(cfg), "digits ViT architecture, random init", {"kind": "random"}
    else:
        cache, seed, progress = request.cache_dir, request.seed, request.progress
        net = pretrained_digits_vit(cache, seed=seed, progress=progress, config=cfg)
        path = digits_checkpoint(cache, seed=seed, progress=progress, config=cfg)
        acc = float(checkpoint_info(path).get("val_acc", "nan"))
        desc = (f"digits ViT (timm {cfg.model}: img {cfg.img_size}, patch {cfg.patch_size}, dim "
                f"{cfg.embed_dim}, depth {cfg.depth}), pretrained on digits {cfg.classes} (val acc "
                f"{acc:.3f}), " + ("shipped with the package" if path.parent == SHIPPED_DIR
                                   else f"cached at {path}"))
        origin = {"kind": "digits", "file": str(path)}
    transform = ImageTransform(cfg.img_size, (0.5,) * 3, (0.5,) * 3, "bilinear", 1.0, "center", DIGITS_MODEL)
    return BuiltModel(net.eval(), cfg.img_size, desc, DIGITS_MODEL, {}, transform, origin)
