"""Every criterion against an independent float64 implementation on a tiny ViT."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from criteria_helpers import tiny_model, tiny_setting
from scipy import stats
from vitplast.criteria import CRITERIA, CriterionResult, get_criterion
from vitplast.criteria.spectral import power_law_fit

PATHS = {"LN1": "norm1", "MHA": "attn", "LN2": "norm2", "FC1": "mlp.fc1", "FC2": "mlp.fc2"}
RTOL = 2e-4


@pytest.fixture(scope="module")
def setting():
    return tiny_setting()


def _double(seed: int) -> torch.nn.Module:
    return tiny_model(seed).double()


def _unit_params(net, c: str, layer: int) -> dict[str, torch.Tensor]:
    prefix = f"blocks.{layer}.{PATHS[c]}."
    return {n: p for n, p in net.named_parameters() if n.startswith(prefix)}


def _grid(fn) -> np.ndarray:
    return np.array([[fn(c, layer) for layer in range(2)] for c in PATHS])


def test_size_is_the_exact_parameter_count(setting):
    res = get_criterion("size").score(setting)
    net = tiny_model(0)
    want = _grid(lambda c, l: sum(p.numel() for p in _unit_params(net, c, l).values()))
    assert np.array_equal(res.values, want)
    assert res.overall("MHA") == want[1].sum()  # a component's size: the sum over layers
    assert res.cost.forwards == res.cost.backwards == 0


def _reference_alpha(eigs: np.ndarray, min_tail: int = 5) -> float:
    """Brute force: every xmin, the MLE alpha, the KS distance from scipy.stats.kstest."""
    x = np.sort(eigs[eigs > 0])
    best = (math.inf, math.nan)
    for xmin in np.unique(x)[: len(np.unique(x))]:
        tail = x[x >= xmin]
        if len(tail) < min_tail:
            continue
        alpha = 1 + len(tail) / np.sum(np.log(tail / xmin))
        d = stats.kstest(tail, lambda v, a=alpha, m=xmin: 1 - (v / m) ** (1 - a)).statistic
        if d < best[0] - 1e-15:
            best = (d, alpha)
    return best[1]


def test_power_law_fit_matches_a_brute_force_fit():
    rng = np.random.default_rng(0)
    sample = (1 - rng.random(300)) ** (-1 / 1.5)  # Pareto, alpha = 2.5
    alpha, xmin, ks, n = power_law_fit(sample)
    assert alpha == pytest.approx(_reference_alpha(sample), rel=1e-12)
    assert 2.0 < alpha < 3.0 and n >= 5 and 0 <= ks < 1 and xmin >= sample.min()
    assert math.isnan(power_law_fit([1.0, 2.0])[0])  # too few eigenvalues: not defined


def test_spectral_against_float64_eigenvalues(setting):
    res = get_criterion("spectral").score(setting)
    net = _double(0)

    def alpha(c, l):
        ws = [p for n, p in _unit_params(net, c, l).items() if n.endswith("weight") and p.dim() == 2]
        if not ws:
            return math.nan
        return float(np.mean([_reference_alpha(np.linalg.eigvalsh((w.T @ w).detach().numpy())) for w in ws]))

    want = _grid(alpha)
    assert np.isnan(res.values[[0, 2]]).all()  # LayerNorms: no weight matrix, not defined (never 0)
    np.testing.assert_allclose(res.values, want, rtol=1e-6)
    assert res.to_dict()["components"]["LN1"]["per_layer"] == [None, None]


def test_cka_against_the_feature_space_formula(setting):
    res = get_criterion("cka").score(setting)
    net = _double(0)
    acts = {}

    def hook(name):
        def fn(mod, args, out):
            acts[name] = (args[0].flatten(1), out.flatten(1))
        return fn

    for c, path in PATHS.items():
        for l in range(2):
            net.get_submodule(f"blocks.{l}.{path}").register_forward_hook(hook((c, l)))
    total = {}
    with torch.no_grad():
        for b in setting.batches:
            net(b.images.double())
            for k, (x, y) in acts.items():
                x, y = x - x.mean(0), y - y.mean(0)
                cka = (y.T @ x).norm() ** 2 / ((x.T @ x).norm() * (y.T @ y).norm())
                total[k] = total.get(k, 0.0) + (1 - float(cka)) / len(setting.batches)
    np.testing.assert_allclose(res.values, _grid(lambda c, l: total[(c, l)]), rtol=RTOL, atol=1e-6)


def _labelled(setting):
    x = torch.cat([b.images for b in setting.batches]).double()
    y = torch.cat([b.labels for b in setting.batches])
    return x, y


def test_rgn_against_float64_autograd(setting):
    res = get_criterion("rgn").score(setting)
    x, y = _labelled(setting)
    per_seed = []
    for s in setting.seeds:
        net = _double(s)
        F.cross_entropy(net(x), y).backward()
        per_seed.append(_grid(lambda c, l, net=net: math.sqrt(
            sum(float(p.grad.pow(2).sum()) for p in _unit_params(net, c, l).values()))
            / math.sqrt(sum(float(p.detach().pow(2).sum()) for p in _unit_params(net, c, l).values()))))
    for s, want in zip(setting.seeds, per_seed, strict=True):
        np.testing.assert_allclose(res.per_seed[s], want, rtol=RTOL)
    np.testing.assert_allclose(res.values, np.mean(per_seed, axis=0), rtol=RTOL)
    assert res.cost.backwards == len(setting.batches) * len(setting.seeds)
    assert res.to_dict()["meta"]["seeds"] == [0, 1]


def test_fisher_against_per_sample_float64_gradients(setting):
    res = get_criterion("fisher").score(setting)
    x, y = _labelled(setting)
    for s in setting.seeds:
        net = _double(s)
        sums = np.zeros((5, 2))
        for i in range(len(x)):
            net.zero_grad()
            F.cross_entropy(net(x[i:i + 1]), y[i:i + 1]).backward()
            sums += _grid(lambda c, l, net=net: sum(float(p.grad.pow(2).sum())
                                                    for p in _unit_params(net, c, l).values()))
        sizes = _grid(lambda c, l, net=net: sum(p.numel() for p in _unit_params(net, c, l).values()))
        np.testing.assert_allclose(res.per_seed[s], sums / len(x) / sizes, rtol=RTOL)
    assert "sum" in res.extra


def test_plasticity_against_float64_hooks(setting):
    res = get_criterion("plasticity").score(setting)
    net = _double(0)
    rates = {}

    def hook(key):
        def fn(mod, args, out):
            a, b = args[0].flatten(1), out.flatten(1)
            h = a.shape[0] // 2
            rates.setdefault(key, []).append((b[:h] - b[h:]).norm(dim=1) / (a[:h] - a[h:]).norm(dim=1))
        return fn

    for c, path in PATHS.items():
        for l in range(2):
            net.get_submodule(f"blocks.{l}.{path}").register_forward_hook(hook((c, l)))
    with torch.no_grad():
        for xb in setting.pair_batches():
            net(xb.double())
    want = _grid(lambda c, l: float(torch.cat(rates[(c, l)]).mean()))
    np.testing.assert_allclose(res.values, want, rtol=RTOL)


def test_result_round_trips_through_json(setting, tmp_path):
    res = get_criterion("spectral").score(setting)
    res.to_json(tmp_path / "spectral.json")
    back = CriterionResult.from_json(tmp_path / "spectral.json")
    np.testing.assert_array_equal(back.values, res.values)
    assert back.ranking() == res.ranking() and back.components == res.components
    res.to_csv(tmp_path / "spectral.csv")
    assert (tmp_path / "spectral.csv").read_text().splitlines()[0].startswith("component,layer,score")


def test_names_are_checked():
    with pytest.raises(ValueError, match="unknown criterion 'nope'"):
        get_criterion("nope")
    assert set(CRITERIA) == {"plasticity", "rgn", "fisher", "cka", "spectral", "size"}


def test_the_example_criterion_of_the_contributing_notes_runs(setting):
    import re
    from pathlib import Path

    notes = (Path(__file__).resolve().parents[3] / "DEVELOPERS.md").read_text()
    section = notes[notes.index("## Adding a criterion"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "DEVELOPERS.md", "exec"), namespace)
    res = namespace["WeightNorm"]().score(setting)
    net = tiny_model(0)
    want = _grid(lambda c, l: math.sqrt(sum(float(p.detach().double().pow(2).sum())
                                            for p in _unit_params(net, c, l).values())))
    np.testing.assert_allclose(res.values, want, rtol=1e-12)
