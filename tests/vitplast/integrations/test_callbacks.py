"""vitplast.integrations: the Lightning callback and the Hugging Face TrainerCallback on real trainers
with tiny CPU models (metrics in the trainers' loggers, files written, DDP on gloo), and the lazy
import's error when a framework is missing."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import vitplast.integrations as integrations

from vitplast_kernels import PlasticityResult

COMPS = ("LN1", "MHA", "LN2", "FC1", "FC2")
HERE = Path(__file__).parent


def test_missing_framework_names_the_extra(monkeypatch):
    for name, module, extra in (("PlasticityCallback", "lightning", "lightning"),
                                ("PlasticityTrainerCallback", "transformers", "hf")):
        monkeypatch.delitem(vars(integrations), name, raising=False)
        monkeypatch.setitem(sys.modules, module, None)
        with pytest.raises(ImportError, match=rf"vitplast-kernels\[{extra}\]"):
            getattr(integrations, name)
        monkeypatch.undo()
    with pytest.raises(AttributeError):
        integrations.NoSuchCallback  # noqa: B018


# ---------------------------------------------------------------------------------------- Lightning
L = pytest.importorskip("lightning")
app = pytest.importorskip("lightning_app")


def _csv_rows(out: Path) -> list[dict]:
    (path,) = out.glob("csv/version_*/metrics.csv")
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_lightning_callback_logs_and_writes(tmp_path, recwarn, accumulate):
    cb = integrations.PlasticityCallback(every=2)
    trainer = app.fit(tmp_path, cb, max_steps=6, accumulate=accumulate)
    assert trainer.global_step == 6
    rows = [r for r in _csv_rows(tmp_path) if r.get("plasticity/MHA")]
    assert [int(r["step"]) for r in rows] == [0, 2, 4]  # logged at the steps measured (Lightning's numbers)
    hparams = (next(tmp_path.glob("csv/version_*")) / "hparams.yaml").read_text()
    assert "plasticity:" in hparams and "every: 2" in hparams and "pairs: halves" in hparams
    for r in rows:
        for c in COMPS:
            assert math.isfinite(float(r[f"plasticity/{c}"]))
            layers = [float(r[f"plasticity/{c}/layer_{i}"]) for i in (0, 1)]
            assert float(r[f"plasticity/{c}"]) == pytest.approx(sum(layers) / 2, rel=1e-9)
    assert "plasticity/MHA" in trainer.callback_metrics
    # every micro-batch of a measured step: 4 pairs per batch of 8, 3 steps
    res = PlasticityResult.from_json(Path(trainer.log_dir) / "plasticity.json")
    assert cb.files == [Path(trainer.log_dir) / "plasticity.json"]
    assert res.components == COMPS and res.meta["measured_steps"] == 3 and res.meta["every"] == 2
    assert res.meta["model"] == "vit_tiny_patch16_224"  # the ViT inside the LightningModule
    for c in COMPS:
        assert res.n_pairs(c).tolist() == [3 * 4 * accumulate] * 2
    # sanity check and validation batches (7 images) were never measured: nothing skipped or warned
    assert res.meta["skipped_steps"] == 0 and "skipped_batches" not in res.meta
    assert not [w for w in recwarn if "does not fit" in str(w.message)]
    assert cb.steps.monitor is None  # hooks removed at teardown
    hooks = [m for m in trainer.lightning_module.modules() if m._forward_hooks or m._forward_pre_hooks]
    assert hooks == []


@pytest.mark.slow
def test_lightning_callback_on_a_compiled_model(tmp_path):
    """The hooks attached at fit start trace into the compiled ViT: two graphs (measured, plain) for
    six steps measured every second one, and the measured steps' pairs all there."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    cb = integrations.PlasticityCallback(every=2)
    app.fit(tmp_path, cb, max_steps=6, val=False, compile_backend=backend)
    assert len(graphs) == 2
    res = cb.result
    assert cb.steps.measured_steps == 3
    for c in COMPS:
        assert res.n_pairs(c).tolist() == [3 * 4] * 2 and torch.isfinite(res.mean(c)).all()


def _run_script_ddp(out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(HERE / "lightning_app.py"), str(out), "ddp", "2"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [
    "ddp_spawn",
    pytest.param("ddp", marks=[pytest.mark.slow, pytest.mark.skipif(
        not os.environ.get("VITPLAST_SLOW_TESTS"),
        reason="re-executes the script per rank: two fresh interpreters importing torch, timm and lightning "
               "(30-80 s on 2 cores); VITPLAST_SLOW_TESTS=1 runs it")]),
])
def test_lightning_ddp_two_processes_gloo(tmp_path, strategy):
    """Two ranks on gloo: ``ddp_spawn`` starts two fresh processes (a fork fails once this process
    has run autograd's threads, as it has after other tests); ``ddp``
    is Lightning's script launcher. The logged and the written values are those of the sums over both
    ranks."""
    if strategy == "ddp":
        _run_script_ddp(tmp_path)
    else:
        app.main(str(tmp_path), strategy, "2")
    local = {(r, n): PlasticityResult.from_json(tmp_path / f"local_r{r}_{n}.json")
             for r in (0, 1) for n in (0, 1)}
    total = PlasticityResult.from_json(tmp_path / "plasticity.json")
    assert total.meta["world_size"] == 2 and total.meta["measured_steps"] == 2
    expected = sum(x.stats for x in local.values())
    torch.testing.assert_close(total.stats, expected, rtol=1e-12, atol=0)
    assert not torch.equal(local[0, 0].stats, local[1, 0].stats)  # the ranks saw different batches
    rows = [r for r in _csv_rows(tmp_path) if r.get("plasticity/MHA")]
    assert [int(r["step"]) for r in rows] == [0, 2]  # rank 0 only, once per measured step
    for n, r in enumerate(rows):
        both = local[0, n].merge(local[1, n])
        for c in COMPS:
            assert float(r[f"plasticity/{c}"]) == pytest.approx(both.overall(c), rel=1e-9)


# ---------------------------------------------------------------------------------------- transformers
transformers = pytest.importorskip("transformers")


class _Recorder(transformers.TrainerCallback):
    """Stands for a report_to integration: it receives every log event before later callbacks."""

    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append({**logs, "_step": state.global_step})


def _hf_trainer(out: Path, recorder, callbacks=(), max_steps: int = 5, logging_steps: int = 100,
                report_to=()):
    from transformers import Trainer, TrainingArguments, ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    image_size=32, patch_size=8, num_labels=4)
    g = torch.Generator().manual_seed(0)
    data = [{"pixel_values": torch.randn(3, 32, 32, generator=g), "labels": int(i % 4)} for i in range(48)]
    args = TrainingArguments(output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=8,
                             logging_steps=logging_steps, save_strategy="no", report_to=list(report_to),
                             use_cpu=True, disable_tqdm=True, learning_rate=1e-3, dataloader_num_workers=0)
    return Trainer(model=ViTForImageClassification(cfg), args=args, train_dataset=data,
                   callbacks=[recorder, *callbacks])


FORMS = ("callbacks", "add_callback", "bound")  # Trainer(callbacks=[cb]); add_callback(cb); cb.trainer given


def _registered(tmp_path, form: str, cb, recorder, **kw):
    trainer = _hf_trainer(tmp_path, recorder, [cb] if form == "callbacks" else [], **kw)
    if form == "bound":
        cb.trainer = trainer
    if form != "callbacks":
        trainer.add_callback(cb)
    return trainer


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
def test_hf_trainer_callback_logs_and_writes(tmp_path, form):
    """However it is registered, the values go through the trainer's logging at the steps measured
    (the trainer's numbers: 2, 4 with every=2), reaching the callbacks that come before it."""
    recorder = _Recorder()
    cb = integrations.PlasticityTrainerCallback(every=2, per_layer=True)
    trainer = _registered(tmp_path, form, cb, recorder)
    trainer.train()
    history = [h for h in trainer.state.log_history if "plasticity/MHA" in h]
    assert [h["step"] for h in history] == [2, 4]
    for h in history:
        for c in COMPS:
            assert math.isfinite(h[f"plasticity/{c}"]) and f"plasticity/{c}/layer_1" in h
    assert [r["_step"] for r in recorder.logs if "plasticity/MHA" in r] == [2, 4]
    assert cb.trainer is trainer
    res = PlasticityResult.from_json(tmp_path / "plasticity.json")
    assert cb.files == [tmp_path / "plasticity.json"]
    assert res.meta["measured_steps"] == 2 and res.meta["preset"] in ("hf-vit", "hf-vit-layers")
    assert res.meta["model"] == "ViTForImageClassification"
    for c in COMPS:
        assert res.n_pairs(c).tolist() == [2 * 4] * 2
    assert json.loads((tmp_path / "plasticity.json").read_text())["format"] == "vitplast-plasticity/1"
    assert cb.steps.monitor is None


@pytest.mark.slow
@pytest.mark.parametrize("logging_steps", [1, 3])
def test_hf_trainer_callback_never_changes_the_trainers_own_logs(tmp_path, logging_steps):
    """Whatever the registration, the trainer's loss rows are those of a run without the callback: the
    same steps, the same values; the plasticity joins the loss row at a step both log."""

    def run(form: str):
        cb = integrations.PlasticityTrainerCallback(every=2)
        trainer = _registered(tmp_path / form, form, cb, _Recorder(), max_steps=6,
                              logging_steps=logging_steps)
        if form == "plain":
            trainer.remove_callback(cb)
        trainer.train()
        history = trainer.state.log_history
        losses = [(h["step"], h["loss"]) for h in history if "loss" in h]
        return losses, [h["step"] for h in history if "plasticity/MHA" in h], history

    plain, _, _ = run("plain")
    assert [step for step, _ in plain] == list(range(logging_steps, 7, logging_steps))
    for form in FORMS:
        losses, measured, history = run(form)
        assert [step for step, _ in losses] == [step for step, _ in plain], form
        assert [v for _, v in losses] == pytest.approx([v for _, v in plain], rel=1e-6), form
        assert measured == [2, 4, 6], form
        joined = [h["step"] for h in history if "loss" in h and "plasticity/MHA" in h]
        assert joined == [s for s in (2, 4, 6) if s % logging_steps == 0], form


@pytest.mark.slow
def test_hf_default_every_is_the_logging_steps_and_the_console_keeps_one_line(tmp_path, capsys):
    """every=None: measured exactly where the loss is logged, one log event (one printed line) per
    logging step, holding the loss and one value per component."""
    cb = integrations.PlasticityTrainerCallback()
    trainer = _hf_trainer(tmp_path, _Recorder(), [cb], max_steps=6, logging_steps=3)
    capsys.readouterr()
    trainer.train()
    rows = [h for h in trainer.state.log_history if "loss" in h or "plasticity/MHA" in h]
    assert [(h["step"], "loss" in h, "plasticity/MHA" in h) for h in rows] == [(3, True, True),
                                                                              (6, True, True)]
    printed = [line for line in capsys.readouterr().out.splitlines() if "'loss'" in line]
    assert len(printed) == 2 and all(line.count("plasticity/") == len(COMPS) for line in printed)
