"""PlasticityResult statistics and reports, and pairwise_plasticity on plain tensors."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

import vitplast_kernels as vk
from vitplast_kernels.measure.pairings import get_pairing, pair_stats
from vitplast_kernels.measure.result import PlasticityResult


def _pairs(gen, n=10, shape=(5, 8), scale=1.0):
    x = torch.randn(2 * n, *shape, generator=gen)
    y = torch.randn(2 * n, *shape, generator=gen) * scale
    return x, y


def _truth(x, y):
    b = x.shape[0] // 2
    num = (y[:b].double() - y[b:].double()).pow(2).flatten(1).sum(1)
    den = (x[:b].double() - x[b:].double()).pow(2).flatten(1).sum(1)
    return (num / den).sqrt()


def test_mapping_statistics_match_definition(gen):
    (x1, y1), (x2, y2) = _pairs(gen, 9), _pairs(gen, 7, scale=3.0)
    res = vk.pairwise_plasticity({"A": (x1, y1), "B": [(x1, y1), (x2, y2)]})
    assert res.components == ("A", "B") and res.layers == ("0", "1")
    r1, r2 = _truth(x1, y1), _truth(x2, y2)
    assert torch.allclose(res.mean("B"), torch.stack([r1.mean(), r2.mean()]), rtol=1e-6)
    assert torch.allclose(res.std("B"), torch.stack([r1.std(), r2.std()]), rtol=1e-5)
    half = 1.959963984540054 * r2.std() / math.sqrt(7)
    assert torch.allclose(res.ci("B")[1], torch.stack([r2.mean() - half, r2.mean() + half]), rtol=1e-5)
    assert res.n_pairs("B").tolist() == [9, 7]
    assert res.n_pairs("A").tolist() == [9, 0] and math.isnan(res.mean("A")[1].item())
    assert res.ranking()[0][0] == "B"  # outputs 3x wider: higher rates
    assert res.overall("B") == pytest.approx((r1.mean() + r2.mean()).item() / 2, rel=1e-6)


def test_identical_and_nonfinite_pairs_counted_not_averaged(gen):
    x, y = _pairs(gen, 6)
    x[6], y[6] = x[0], y[0] * 5  # pair 0: identical input (output differs: still excluded)
    y[1, 0, 0] = float("inf")  # pair 1: non-finite output
    x[2, 1, 1] = float("nan")  # pair 2: non-finite input
    res = vk.pairwise_plasticity({"f": (x, y)})
    assert res.n_identical("f").item() == 1 and res.n_nonfinite("f").item() == 2
    assert res.n_pairs("f").item() == 3
    assert torch.allclose(res.mean("f"), _truth(x, y)[3:].mean(), rtol=1e-6)
    with pytest.raises(ValueError, match=r"f layer 0: 2 pair"):
        vk.pairwise_plasticity({"f": (x, y)}, strict=True)


def test_pair_stats_layout():
    s_in = torch.tensor([4.0, 0.0, 1.0, float("nan")])
    s_out = torch.tensor([1.0, 3.0, 9.0, 1.0])
    st = pair_stats(s_in, s_out)
    assert st.dtype == torch.float64
    assert st.tolist() == [2.0, 0.5 + 3.0, 0.25 + 9.0, 1.0, 1.0]


def test_mapping_errors(gen):
    x, y = _pairs(gen, 2)
    with pytest.raises(ValueError, match=r"pairs='halves' needs an even batch.*acts\['f'\] input"):
        vk.pairwise_plasticity({"f": (x[:3], y[:3])})
    with pytest.raises(ValueError, match="even batch"):
        vk.pairwise_plasticity({"f": (x[:1], y[:1])})
    with pytest.raises(TypeError, match=r"acts\['f'\] must be \(input, output\)"):
        vk.pairwise_plasticity({"f": x})
    with pytest.raises(TypeError, match="acts must be"):
        vk.pairwise_plasticity([x, y])
    assert get_pairing("all").name == "all"  # registered by vitplast_kernels.measure.pairings


def test_no_sync_until_asked_and_merge(gen):
    x, y = _pairs(gen, 4)
    a = vk.pairwise_plasticity({"f": (x, y)})
    assert a._host_cache is None  # nothing copied yet
    m = a.merge(vk.pairwise_plasticity({"f": (x[[0, 1, 4, 5]], y[[0, 1, 4, 5]])}))
    assert m.n_pairs("f").item() == 6
    r = _truth(x, y)
    assert torch.allclose(m.mean("f"), torch.cat([r, r[:2]]).mean(), rtol=1e-6)
    with pytest.raises(ValueError, match="cannot merge a pairs='all' result into a pairs='halves' one"):
        a.merge(vk.pairwise_plasticity({"f": (x, y)}, pairs="all"))


def test_json_roundtrip_atomic_and_table(tmp_path, gen):
    (x1, y1), (x2, y2) = _pairs(gen, 5), _pairs(gen, 5)
    res = vk.pairwise_plasticity({"LN1": [(x1, y1), (x2, y2)], "MHA": [(x2, y2), (x1, y1 * 2)]})
    path = tmp_path / "sub" / "res.json"
    res.to_json(path)
    assert [p.name for p in path.parent.iterdir()] == ["res.json"]  # no temp file left
    d = json.loads(path.read_text())
    assert d["components"]["MHA"]["n_pairs"] == [5, 5] and d["ranking"][0][0] == "MHA"
    back = PlasticityResult.from_json(path)
    assert torch.equal(back.stats, res.stats.cpu()) and back.layers == res.layers
    for c in res.components:
        assert torch.equal(back.mean(c), res.mean(c))
    table = res.table()
    assert "LN1" in table and "MHA" in table and "ranking: MHA" in table

    before = path.read_text()
    with pytest.MonkeyPatch.context() as mp:  # crash between writing the temp file and the rename
        mp.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("killed")))
        with pytest.raises(OSError, match="killed"):
            vk.pairwise_plasticity({"LN1": (x1, y1)}).to_json(path)
    assert path.read_text() == before and os.listdir(path.parent) == ["res.json"]


def test_plot_writes_png(tmp_path, gen):
    x, y = _pairs(gen, 4)
    res = vk.pairwise_plasticity({c: [(x, y * (i + 1)), (x, y)] for i, c in enumerate("ABC")})
    path = tmp_path / "plot.png"
    res.plot(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_shape_validation():
    with pytest.raises(ValueError, match=r"stats must have shape \(C, L, 5\)"):
        PlasticityResult(torch.zeros(2, 3, 4, dtype=torch.float64), ["a", "b"], ["0", "1", "2"])
    res = PlasticityResult(torch.zeros(1, 1, 5, dtype=torch.float64), ["a"], ["0"])
    with pytest.raises(KeyError, match="'b' was not measured"):
        res.mean("b")
    with pytest.raises(ValueError, match="per_head=True"):
        res.head_mean()


def test_mapping_dtype_error_names_the_entry():
    x = torch.zeros(4, 2, dtype=torch.int64)
    with pytest.raises(TypeError, match=r"acts\['f'\] input must be float32"):
        vk.pairwise_plasticity({"f": (x, torch.zeros(4, 2))})
