"""What a finetuning run shows besides its metrics.jsonl: the progress bar and TensorBoard scalars."""

from __future__ import annotations

import sys
from pathlib import Path


def progress_bar(cfg, dctx, total, initial, desc):
    """A tqdm bar on rank 0 (``--progress``/``--no-progress``; default: when stderr is a terminal)."""
    from tqdm.auto import tqdm

    enabled = cfg["progress"] if cfg["progress"] is not None else sys.stderr.isatty()
    return tqdm(total=total, initial=initial, desc=desc, disable=not (enabled and dctx.is_main),
                dynamic_ncols=True, leave=False)


def tensorboard_writer_class():
    """``SummaryWriter``, or ImportError saying what to install (checked before a run starts)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError("--tensorboard needs the tensorboard package: pip install tensorboard") from exc
    return SummaryWriter


def tensorboard(run_path: Path):
    """A writer of ``run_path/tb``."""
    return tensorboard_writer_class()(str(run_path / "tb"))


def tensorboard_write(tb, rec: dict, step: int) -> None:
    """The scalars of one metrics record (loss, lr, accuracy, plasticity and gradient norm per group)."""
    if tb is None:
        return
    kind = rec["kind"]
    for key in ("loss", "lr", "acc"):
        if key in rec:
            tb.add_scalar(f"{kind}/{key}", rec[key], step)
    for group, value in rec.get("plasticity_mean", {}).items():
        tb.add_scalar(f"plasticity/{group}", value, step)
    for group, value in rec.get("grad_norm", {}).items():
        tb.add_scalar(f"grad_norm/{group}", value, step)
