"""The criteria benchmark runs end to end on a tiny ViT (its ViT-B/16 figures are not taken in CI)."""

from __future__ import annotations

from bench import criteria


def test_rows_on_a_tiny_model():
    out = criteria.rows("cpu", "vit_tiny_patch16_224", images=4, batch_size=2, img_size=16, patch_size=8,
                        depth=1, embed_dim=16, num_heads=2)
    names = [r["criterion"] for r in out]
    assert names[0].startswith("train step") and set(names[1:]) == set(criteria_names())
    by = {r["criterion"]: r for r in out}
    assert by["rgn"]["backwards"] == 2 and by["size"]["forwards"] == 0 and by["cka"]["forwards"] == 2
    assert all(r["seconds"] >= 0 for r in out) and by["size"]["peak_mib"] is None  # CPU: no device peak


def criteria_names():
    from vitplast.criteria import CRITERIA

    return list(CRITERIA)
