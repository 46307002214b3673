"""What the commands share has one home each: the model builder, the device check, the plotting style
(no global matplotlib state), the per-step recorder on vk.monitor's schedule, and the mean over layers
(the result's)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vitplast.models import builder as model_builder
from vitplast.models import digits as digits_model
from vitplast.outputs.plots import figure, save
from vitplast.runtime.device import check_device, resolve_device

from vitplast_kernels import PlasticityResult


def test_digits_model_options_are_checked_in_one_place():
    with pytest.raises(ValueError, match="--img-size 64: digits-vit takes 32x32 images"):
        digits_model.check_digits_options({}, 64)
    with pytest.raises(ValueError, match="--model-arg does not apply to digits-vit"):
        digits_model.check_digits_options({"depth": 2}, None)
    assert digits_model.check_digits_options({}, None) == 32


def test_timm_model_input_size_and_random_init_asked_for():
    from vitplast.options.groups import ModelOptions

    with pytest.raises(ValueError, match="--random-init"):
        ModelOptions(model="vit_tiny_patch16_224")
    opts = ModelOptions(model="vit_tiny_patch16_224", img_size=32, random_init=True,
                        model_kwargs={"depth": 1, "patch_size": 8})
    built = model_builder.build_model(opts.model_request(), 3)
    assert built.img_size == 32 and built.timm_kwargs == {"depth": 1, "patch_size": 8}
    assert not built.net.training


@pytest.mark.parametrize("text", ["tpu", "cuda:x", "meta"])
def test_device_check_wording(text):
    with pytest.raises(ValueError):
        check_device(text)


def test_auto_device_and_local_rank():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu", local_rank=1) == torch.device("cpu")


def test_plots_leave_global_matplotlib_state_alone(tmp_path):
    import matplotlib

    backend, rc = matplotlib.get_backend(), dict(matplotlib.rcParams)
    import vitplast.profile.command  # noqa: F401 - importing it must not switch the backend

    fig, ax = figure(1, 2, (4, 2))
    ax[0, 1].plot([0, 1], [1, 0])
    path = save(fig, tmp_path / "f.png")
    assert path.read_bytes().startswith(b"\x89PNG")
    assert matplotlib.get_backend() == backend
    assert dict(matplotlib.rcParams) == rc
    import sys

    if "matplotlib.pyplot" in sys.modules:
        assert not sys.modules["matplotlib.pyplot"].get_fignums()


def test_claim_replicates_are_the_results_statistics(gen):
    chunks = torch.rand(2, 3, 4, 5, generator=gen, dtype=torch.float64) * 10
    chunks[..., 0] = torch.randint(0, 3, (2, 3, 4), generator=gen).double()
    chunks[:, 1, :, 0] = 0  # a component without pairs
    from vitplast_kernels.measure.chunks import ChunkedResult

    parts = [PlasticityResult(chunks[k], ["A", "B", "C"], ["0", "1", "2", "3"]) for k in range(2)]
    res = ChunkedResult.from_results(parts)
    assert torch.equal(res.stats, chunks[0] + chunks[1]) and torch.equal(res.chunk_stats, chunks)
    per_layer, overall = res.replicate_means([[1.0, 1.0], [2.0, 0.0]])  # all chunks; chunk 0 twice
    twice = PlasticityResult(2 * chunks[0], res.components, res.layers)
    for i, c in enumerate(res.components):
        for row, ref in ((0, res), (1, twice)):
            np.testing.assert_allclose(per_layer[row, i], ref.mean(c), rtol=1e-15, equal_nan=True)
            np.testing.assert_allclose(overall[row, i], ref.overall(c), rtol=1e-14, equal_nan=True)


def test_step_recorder_follows_the_monitors_schedule():
    import timm
    from vitplast.finetune.step_recorder import StepRecorder

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=8, depth=1,
                              num_classes=3)
    x = torch.randn(4, 3, 16, 16)
    rec = StepRecorder(model, 3, start=4)  # a resumed run continues the schedule: steps 6, 9, ...
    recorded = []
    try:
        for it in range(4, 11):
            with rec.training_forward():
                loss = model(x).logsumexp(-1).mean()
            loss.backward()
            if rec.due:
                r = rec.record(it, loss, 0.1)
                recorded.append(it)
                assert r["source"] == "halves"
                assert set(r["plasticity_mean"]) == {"LN1", "MHA", "LN2", "FC1", "FC2"}
                assert all(p == 2 for p in r["pairs"]["MHA"])  # this step's forward only (eval is not seen)
            model.zero_grad()
            with torch.no_grad():
                model(x)  # an evaluation forward between steps: never captured
            rec.step()
    finally:
        rec.close()
    assert recorded == [6, 9]


def test_one_options_description_gives_cli_and_python_the_same_wording(tmp_path, capsys):
    from vitplast.cli import main
    from vitplast.finetune import finetune
    from vitplast.measure.options import MeasureOptions
    from vitplast.options.fields import OptionError, resolve

    with pytest.raises(OptionError, match=r"^--batches: must be a positive integer, got 0$"):
        resolve(MeasureOptions, {"batches": "0"})
    with pytest.raises(ValueError, match=r"^--steps: must be an integer in 1\.\.1000000000, got 0$"):
        finetune(steps=0, out=str(tmp_path / "o"))
    assert main(["finetune", "--steps", "0", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == ("vitplast finetune: error: --steps: must be an integer in "
                                       "1..1000000000, got 0\n")
    opts = resolve(MeasureOptions, {"amp": "bfloat16", "components": ["MHA=blocks.*.attn"]})
    assert opts.amp == "bf16" and opts.components == {"MHA": "blocks.*.attn"} and opts.batches == 4
