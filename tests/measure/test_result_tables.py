"""PlasticityResult's tables and figures: records, DataFrame and CSV (one row per component and layer,
or per layer and head), the curves and heatmap figures, and the one colour of each component label."""

from __future__ import annotations

import csv
import sys

import pytest
import torch

import vitplast_kernels as vk
from vitplast_kernels.measure.figures import (
    COMPONENT_COLORS,
    component_color,
    draw_result,
    layer_ticks,
    log_axis,
    new_figure,
)

timm = pytest.importorskip("timm")


def _result(gen, per_head=False) -> vk.PlasticityResult:
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=3, embed_dim=32,
                              num_heads=2, num_classes=0).eval()
    with vk.capture(model, per_head=per_head) as acts, torch.no_grad():
        model(torch.randn(8, 3, 32, 32, generator=gen))
    return vk.pairwise_plasticity(acts)


def test_records_hold_the_results_values(gen):
    res = _result(gen)
    rows = res.records()
    assert len(rows) == len(res.components) * res.n_layers
    assert [(r["component"], r["layer"]) for r in rows[:4]] == [("LN1", "0"), ("LN1", "1"), ("LN1", "2"),
                                                                 ("MHA", "0")]
    for r in rows:
        l = res.layers.index(r["layer"])
        assert r["mean"] == res.mean(r["component"])[l].item()
        assert r["std"] == res.std(r["component"])[l].item()
        assert [r["ci_low"], r["ci_high"]] == res.ci(r["component"])[l].tolist()
        assert r["n_pairs"] == 4 and r["n_identical"] == 0 and r["n_nonfinite"] == 0


def test_csv_round_trip_and_undefined_cells(gen, tmp_path):
    res = _result(gen)
    stats = res.stats.clone()
    stats[1, 2] = 0  # MHA layer 2: no pair measured
    res = vk.PlasticityResult(stats, res.components, res.layers, meta=res.meta)
    res.to_csv(tmp_path / "p.csv")
    with open(tmp_path / "p.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["component", "layer", "mean", "std", "sem", "ci_low", "ci_high", "n_pairs",
                             "n_identical", "n_nonfinite"]
    empty = [r for r in rows if r["mean"] == ""]
    assert [(r["component"], r["layer"], r["n_pairs"]) for r in empty] == [("MHA", "2", "0")]
    first = rows[0]
    assert float(first["mean"]) == res.mean("LN1")[0].item()  # repr of a float: exact


def test_dataframe(gen):
    pd = pytest.importorskip("pandas")
    res = _result(gen, per_head=True)
    frame = res.to_dataframe()
    assert isinstance(frame, pd.DataFrame) and frame.shape == (15, 10)
    assert frame.attrs["meta"]["preset"] == res.meta["preset"]
    wide = frame.pivot(index="layer", columns="component", values="mean")
    assert wide.loc[1, "FC1"] == res.mean("FC1")[1].item()
    heads = res.to_dataframe(heads=True)
    assert list(heads.columns[:3]) == ["component", "layer", "head"] and len(heads) == 3 * 2
    assert heads["mean"].tolist() == res.head_mean().flatten().tolist()


def test_dataframe_orders_layers_and_components_as_the_model(gen):
    pd = pytest.importorskip("pandas")
    res = _result(gen)
    stats = torch.rand(2, 12, 5, dtype=torch.float64, generator=gen) + 1
    deep = vk.PlasticityResult(stats, ["MHA", "FC1"], [str(i) for i in range(12)], meta=res.meta)
    frame = deep.to_dataframe()
    assert frame["layer"].dtype == "int64"
    assert frame.sort_values("layer")["layer"].drop_duplicates().tolist() == list(range(12))
    assert frame["component"].dtype == pd.CategoricalDtype(["MHA", "FC1"], ordered=True)
    assert frame.groupby("component", observed=True).size().index.tolist() == ["MHA", "FC1"]
    swin = vk.PlasticityResult(stats[:, :3], ["MHA", "FC1"], ["0.1", "0.0", "1.0"], meta=res.meta)
    frame = swin.to_dataframe()
    assert frame["layer"].dtype == pd.CategoricalDtype(["0.1", "0.0", "1.0"], ordered=True)
    assert frame.sort_values("layer")["layer"].drop_duplicates().tolist() == ["0.1", "0.0", "1.0"]


def test_dataframe_without_pandas_names_the_extra(gen, monkeypatch):
    res = _result(gen)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"vitplast-kernels\[pandas\]"):
        res.to_dataframe()
    with pytest.raises(ValueError, match="per_head=True"):
        res.records(heads=True)


@pytest.mark.parametrize("kind", ["curves", "heatmap"])
def test_figures_are_written(gen, tmp_path, kind):
    res = _result(gen)
    res.plot(tmp_path / f"{kind}.png", kind=kind)
    assert (tmp_path / f"{kind}.png").stat().st_size > 5000
    with pytest.raises(ValueError, match="kind must be one of"):
        res.plot(tmp_path / "x.png", kind="bars")


def test_each_label_has_one_colour():
    assert component_color("MHA") == COMPONENT_COLORS["MHA"] == component_color("MHA@3")
    assert len({component_color(c) for c in ("LN1", "MHA", "LN2", "FC1", "FC2", "head")}) == 6
    assert component_color("ATTN") == component_color("ATTN")  # crc32: the same in every process
    assert component_color("MHA+FC1") != component_color("MHA")
    assert all(c.startswith("#") and len(c) == 7 for c in map(component_color, ("x", "y", "MLP")))


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_curves_legend_outside_the_data_and_the_models_name_in_the_title(gen):
    res = _result(gen)
    fig = draw_result(res, kind="curves")
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert legend is not None
    assert not _overlap(legend.get_window_extent(), ax.get_window_extent())
    assert "vit_tiny_patch16_224" in fig._suptitle.get_text() and "VisionTransformer" not in (
        fig._suptitle.get_text())
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["0", "1", "2"]


def test_layer_ticks_are_integers_at_a_regular_step():
    fig, axes = new_figure((6, 3))
    labels = [str(i) for i in range(40)]
    layer_ticks(axes[0, 0], labels)
    ticks = list(axes[0, 0].get_xticks())
    steps = {b - a for a, b in zip(ticks, ticks[1:], strict=False)}
    assert len(steps) == 1 and all(float(t).is_integer() for t in ticks) and len(ticks) <= 24
    assert [t.get_text() for t in axes[0, 0].get_xticklabels()] == [labels[int(t)] for t in ticks]


@pytest.mark.parametrize("low, high", [(0.02, 0.06), (3.0, 7.0), (0.4, 1.9), (1e-4, 1e2)])
def test_log_axis_labels_several_ticks_on_any_range(low, high):
    fig, axes = new_figure((4, 3))
    ax = axes[0, 0]
    ax.plot([0, 1], [low, high])
    log_axis(ax)
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    shown = [t for t in ax.yaxis.get_major_ticks() if lo <= t.get_loc() <= hi and t.label1.get_text()]
    assert len(shown) >= 2


def test_figures_leave_the_callers_rcparams_alone():
    import matplotlib

    before = dict(matplotlib.rcParams)
    new_figure((3, 3))
    assert dict(matplotlib.rcParams) == before
