"""Checkpoints as other tools write them load weights-only into the model the options name: a Lightning
.ckpt (its state dict under the module's attribute prefix), a timm training checkpoint (EMA weights
first, its arguments in an argparse.Namespace), a plain state dict; a wrapper's prefix is fitted to the
model's names in either direction."""

from __future__ import annotations

import argparse
import warnings

import pytest
import torch
from vitplast.models.builder import build_model
from vitplast.models.checkpoints import align_prefix, read_state_dict
from vitplast.options.groups import ModelOptions

ARCH = dict(model="vit_tiny_patch16_224", img_size=16,
            model_kwargs=dict(patch_size=8, depth=1, embed_dim=16, num_heads=1))


def _tiny(num_classes: int = 3):
    import timm

    return timm.create_model(ARCH["model"], num_classes=num_classes, img_size=16, **ARCH["model_kwargs"])


def _loads(path, reference) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exact fit loads silently
        net = build_model(ModelOptions(**ARCH, weights=str(path)).model_request(), 3).net
    ref = reference.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in net.state_dict().items())


def test_a_lightning_checkpoint_loads(tmp_path):
    lightning = pytest.importorskip("lightning")

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters()
            self.model = _tiny()

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 0]))
    trainer = lightning.Trainer(max_steps=1, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                                default_root_dir=tmp_path)
    module = Module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=2))
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["state_dict"]
    assert all(k.startswith("model.") for k in saved)
    _loads(tmp_path / "last.ckpt", module.model)


def test_a_timm_training_checkpoint_loads_its_ema_weights(tmp_path):
    trained, ema = _tiny(), _tiny()
    args = argparse.Namespace(model=ARCH["model"], lr=0.05, sched="cosine", mean=None)
    torch.save({"epoch": 3, "arch": ARCH["model"], "state_dict": trained.state_dict(),
                "state_dict_ema": {f"module.{k}": v for k, v in ema.state_dict().items()},
                "optimizer": {"state": {}, "param_groups": []}, "args": args, "version": 2},
               tmp_path / "model_best.pth.tar.pth")
    _loads(tmp_path / "model_best.pth.tar.pth", ema)


def test_a_plain_state_dict_loads(tmp_path):
    net = _tiny()
    torch.save(net.state_dict(), tmp_path / "plain.bin")
    _loads(tmp_path / "plain.bin", net)


def test_prefixes_are_fitted_to_the_model_names(tmp_path):
    own = ["blocks.0.attn.qkv.weight", "head.weight"]
    t = torch.zeros(1)
    wrapped = {"net.blocks.0.attn.qkv.weight": t, "net.head.weight": t, "loss.weight": t}
    assert sorted(align_prefix(wrapped, own)) == own  # the wrapper's own tensors are left out
    inner = [f"model.{k}" for k in own]  # the model wraps what the checkpoint holds
    assert sorted(align_prefix({"blocks.0.attn.qkv.weight": t, "head.weight": t}, inner)) == inner
    assert align_prefix({"x.weight": t}, own) == {"x.weight": t}  # no prefix helps: unchanged
    torch.save({"state_dict": wrapped}, tmp_path / "w.ckpt")
    assert "net.head.weight" in read_state_dict(tmp_path / "w.ckpt")  # fitted only against a model
