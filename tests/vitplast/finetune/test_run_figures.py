"""A run's figures and TensorBoard rows: per-layer plasticity in TensorBoard, the steps x layer heatmap
beside the curves of a monitored run, validation points, and the grid's error bars only where there are
two seeds or more (``n = 1`` otherwise, in the figures and the table)."""

from __future__ import annotations

import math

import pytest
from vitplast.finetune.log import tensorboard_write
from vitplast.finetune.plots import STEP_HEATMAP, plot_curves, plot_grid, seed_note
from vitplast.finetune.report import format_table

COMPS = ("MHA", "FC1", "FC2", "LN1", "LN2")


class Writer:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))


def _monitor(step: int) -> dict:
    per_layer = {c: [0.5 + 0.1 * i + 0.01 * step + 0.2 * layer for layer in range(3)]
                 for i, c in enumerate(COMPS)}
    per_layer["MHA"][2] = math.nan  # a layer without pairs
    return {"kind": "monitor", "iter": step, "step": step, "loss": 1.0 / (1 + step), "lr": 1e-3,
            "plasticity": per_layer, "plasticity_mean": {c: sum(v[:2]) / 2 for c, v in per_layer.items()},
            "grad_norm": {"MHA": 1.0, "head": 0.5}}


def _records(steps=(0, 10, 20, 30)) -> list[dict]:
    recs = [{"kind": "eval", "iter": -1, "step": 0, "acc": 0.2, "loss": 2.0}]
    for s in steps:
        recs.append(_monitor(s))
        recs.append({"kind": "train", "iter": s, "step": s, "loss": 1.0 / (1 + s), "lr": 1e-3})
    recs.append({"kind": "eval", "iter": 39, "step": 40, "acc": 0.6, "loss": 1.0})
    return recs


def test_tensorboard_carries_per_layer_values():
    tb = Writer()
    tensorboard_write(tb, _monitor(10), 10)
    tags = {tag for tag, _, _ in tb.scalars}
    assert {"plasticity/FC1", "plasticity/FC1/layer_0", "plasticity/FC1/layer_2"} <= tags
    assert "plasticity/MHA/layer_1" in tags and "plasticity/MHA/layer_2" not in tags  # NaN left out
    assert all(step == 10 for _, _, step in tb.scalars)


@pytest.mark.slow
def test_curves_and_the_steps_heatmap(tmp_path):
    path = plot_curves(_records(), tmp_path / "plots" / "curves.png", title="MHA lr=0.001 seed=0")
    assert path.stat().st_size > 10_000
    assert (tmp_path / "plots" / STEP_HEATMAP).stat().st_size > 5_000
    unmonitored = [r for r in _records() if r["kind"] != "monitor"]
    plot_curves(unmonitored, tmp_path / "other" / "curves.png")
    assert not (tmp_path / "other" / STEP_HEATMAP).exists()


def _row(train, n, std=0.0):
    return {"train": train, "lr": 1e-3, "seeds": list(range(n)), "n": n, "acc_mean": 0.5, "acc_std": std,
            "initial_acc": 0.3, "trainable_params": 100, "plasticity": 0.8, "gain_at_lr": 0.2,
            "gain_at_lr_over": "initial"}


def test_error_bars_only_with_two_seeds(tmp_path):
    assert seed_note([_row("MHA", 1)]) == ("one seed: no error bars", False)
    assert seed_note([_row("MHA", 3, 0.1), _row("FC1", 1)]) == ("mean ± std over seeds", True)
    assert [p.name for p in plot_grid([_row("MHA", 3, 0.1), _row("FC1", 1)], tmp_path)] == [
        "accuracy_per_component.png", "plasticity_vs_gain.png"]
    table = format_table([_row("MHA", 3, 0.1), _row("FC1", 1)])
    assert "± 0.1000" in table and "(n = 1)" in table and "± 0.0000" not in table
