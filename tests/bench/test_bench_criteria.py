"""The criteria benchmark runs end to end on a tiny ViT (its ViT-B/16 figures are not taken in CI)."""

from __future__ import annotations

import pytest

from bench import criteria

TINY = dict(images=4, batch_size=2, img_size=16, patch_size=8, depth=1, embed_dim=16, num_heads=2)


@pytest.mark.slow  # 2-6 s: make test-fast stays under 2 minutes; CI runs it
def test_rows_on_a_tiny_model():
    out = criteria.rows("cpu", "vit_tiny_patch16_224", fresh_process=False, **TINY)
    names = [r["criterion"] for r in out]
    assert names[0] == criteria.TRAIN_STEP and set(names[1:]) == set(criteria_names())
    by = {r["criterion"]: r for r in out}
    assert by["rgn"]["backwards"] == 2 and by["size"]["forwards"] == 0 and by["cka"]["forwards"] == 2
    assert all(r["seconds"] >= 0 for r in out)
    assert by[criteria.TRAIN_STEP]["x_train_step"] == 1.0 and by[criteria.TRAIN_STEP]["verdict"] == "ok"
    assert all(r["peak_mib"] is not None and r["peak_mib"] >= 0 for r in out)  # the CPU's peak too
    assert all(r["verdict"] == ("ok" if r["x_train_step"] <= criteria.LIMIT else "OVER") for r in out)


@pytest.mark.slow
def test_cpu_rows_in_fresh_processes_report_the_peak_over_the_training_step():
    out = criteria.rows("cpu", "vit_tiny_patch16_224", criteria=["size"], **TINY)
    step, size = out
    assert step["criterion"] == criteria.TRAIN_STEP and size["criterion"] == "size"
    assert step["peak_mib"] > 0  # gradients, momentum and activations above the model and the images
    assert size["x_train_step"] == pytest.approx(size["peak_mib"] / step["peak_mib"])
    assert size["verdict"] == ("ok" if size["x_train_step"] <= criteria.LIMIT else "OVER")
    assert step["reset"] and size["reset"]  # the high-water mark was reset after the model was built


def criteria_names():
    from vitplast.criteria import CRITERIA

    return list(CRITERIA)
