"""The callbacks' values in TensorBoard, read back from the event files the trainers wrote: the tags
and the steps (the step each value was measured at, numbered like the trainer's loss), for a
Hugging Face Trainer (``report_to=["tensorboard"]``, either registration) and Lightning's
TensorBoardLogger (hyperparameters included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import vitplast.integrations as integrations

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

COMPS = ("LN1", "MHA", "LN2", "FC1", "FC2")


def scalar_steps(folder: Path) -> dict[str, list[int]]:
    """``{tag: [steps]}`` of every scalar in the event files under ``folder`` (one run directory)."""
    (run,) = {p.parent for p in folder.rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(run))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.slow
@pytest.mark.parametrize("form", ["callbacks", "add_callback"])
def test_hf_values_reach_tensorboard_at_the_measured_steps(tmp_path, form):
    from test_callbacks import _hf_trainer, _Recorder, _registered  # noqa: F401  (the shared tiny trainer)

    cb = integrations.PlasticityTrainerCallback(every=2, per_layer=True)
    trainer = _registered(tmp_path, form, cb, _Recorder(), max_steps=6, logging_steps=3,
                          report_to=["tensorboard"])
    trainer.train()
    steps = scalar_steps(tmp_path)
    assert steps["train/loss"] == [3, 6]
    for c in COMPS:
        assert steps[f"train/plasticity/{c}"] == [2, 4, 6]
        assert steps[f"train/plasticity/{c}/layer_0"] == [2, 4, 6]


@pytest.mark.slow
def test_lightning_values_reach_tensorboard_at_the_measured_steps(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger

    app = pytest.importorskip("lightning_app")
    cb = integrations.PlasticityCallback(every=2)
    app.fit(tmp_path, cb, max_steps=6, val=False,
            logger=TensorBoardLogger(tmp_path, name="tb", default_hp_metric=False))
    steps = scalar_steps(tmp_path / "tb")
    for c in COMPS:
        assert steps[f"plasticity/{c}"] == [0, 2, 4]
        assert steps[f"plasticity/{c}/layer_1"] == [0, 2, 4]
    hparams = (next((tmp_path / "tb").glob("version_*")) / "hparams.yaml").read_text()
    assert "plasticity:" in hparams and "every: 2" in hparams
