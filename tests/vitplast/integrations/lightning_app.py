"""A tiny Lightning app for test_callbacks.py: a 2-block timm ViT at img 32 on random images,
trained with ``PlasticityCallback``. Run as a script (``python lightning_app.py OUT
STRATEGY DEVICES``) it is what Lightning's ``ddp`` launcher re-executes for every rank; each rank also
writes the results it measured locally (``local_r{rank}_{n}.json``) before the ranks are combined."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import lightning as L
import timm
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset
from vitplast.integrations import PlasticityCallback

N_CLASSES = 4


class TinyViT(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2,
                                       embed_dim=32, num_heads=2, num_classes=N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(n: int, batch_size: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 3, 32, 32, generator=g)
    data = TensorDataset(images, torch.randint(0, N_CLASSES, (n,), generator=g))
    return DataLoader(data, batch_size=batch_size, shuffle=False)


def fit(out: Path, callback: PlasticityCallback, *, strategy: str = "auto", devices: int = 1,
        max_steps: int = 6, accumulate: int = 1, val: bool = True, compile_backend=None,
        logger=None) -> L.Trainer:
    warnings.filterwarnings("ignore", message=".*(num_workers|many workers|log_every_n_steps).*")
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(accelerator="cpu", devices=devices, strategy=strategy, max_steps=max_steps,
                        accumulate_grad_batches=accumulate, logger=logger or CSVLogger(out, name="csv"),
                        callbacks=[callback], enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, num_sanity_val_steps=1 if val else 0,
                        limit_val_batches=1 if val else 0, val_check_interval=2 if val else None,
                        log_every_n_steps=50)
    module = TinyViT()
    if compile_backend is not None:  # the ViT compiled; the callback attaches its hooks before it runs
        module.model = torch.compile(module.model, backend=compile_backend)
    # validation batches of 7 images: measured, they would be skipped by pairs="halves" and warn
    trainer.fit(module, loader(64, 8, 0), loader(7, 7, 1) if val else None)
    return trainer


class RecordLocal:
    """Writes each rank's own result of a measured step before the callback combines the ranks (a
    module-level class: ddp_spawn pickles the callback into fresh processes)."""

    def __init__(self, out_dir: Path, combine) -> None:
        self.out_dir, self.combine, self.seen = out_dir, combine, 0

    def __call__(self, local):
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        local.to_json(self.out_dir / f"local_r{rank}_{self.seen}.json")
        self.seen += 1
        return self.combine(local)


def main(out: str, strategy: str, devices: str) -> None:
    out_dir = Path(out)
    cb = PlasticityCallback(every=2, dirpath=out_dir)
    cb.steps.combine = RecordLocal(out_dir, cb.steps.combine)
    fit(out_dir, cb, strategy=strategy, devices=int(devices), max_steps=4, val=False)


if __name__ == "__main__":
    main(*sys.argv[1:4])
