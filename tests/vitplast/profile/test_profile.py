"""`vitplast profile` and its measurements (python/vitplast/profile/profiler.py, peers.py) on a tiny
timm ViT, on CPU."""

from __future__ import annotations

import json

import pytest
import torch

timm = pytest.importorskip("timm")

from helpers import collecting, quiet  # noqa: E402
from vitplast import cli  # noqa: E402
from vitplast.profile import peers as profiler_peers  # noqa: E402
from vitplast.profile import profiler  # noqa: E402

TINY = ["--model", "vit_tiny_patch16_224", "--device", "cpu", "--img-size", "32", "--depth", "2",
        "--reps", "2", "--threads", "1"]


@pytest.fixture(autouse=True)
def _restore_threads():
    """--threads sets torch's thread count process-wide: give other test files theirs back."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2).eval()
    images = torch.randn(6, 3, 32, 32)
    return model, images, profiler.structure(model)


def test_structure_finds_every_component_and_block(tiny):
    model, _, st = tiny
    assert st.components == ("LN1", "MHA", "LN2", "FC1", "FC2")
    assert st.layers == ("0", "1")
    assert st.block["1"] == "blocks.1"
    assert st.modules["FC2"]["0"] == ("blocks.0.mlp.fc2",)
    assert st.embedding.endswith("blocks.0:input")  # e: the tokens entering the first block


def test_structure_is_what_the_capture_measures(tiny):
    import vitplast_kernels as vk

    model, _, st = tiny
    cap = vk.capture(model)
    assert st.components == cap.components and st.layers == cap.layers and st.embedding == cap.embedding


def test_paper_protocol_rates_match_the_decomposition_capture(tiny):
    """The naive peer computes the same numbers as the package's decomposition protocol."""
    import vitplast_kernels as vk

    model, images, st = tiny
    e = profiler_peers.embedding_tokens(model, images, st)
    assert e.shape == (6, 5, 192)  # 4 patches + class token, width 192
    b = images.shape[0] // 2
    outs = [profiler_peers.decomposition_outputs(model, half, st, st.layers) for half in (e[:b], e[b:])]
    d_in = profiler_peers.eager_distance(e[:b].double(), e[b:].double())
    with torch.no_grad(), vk.capture(model, protocol="decomposition") as acts:
        model(images)
    res = vk.pairwise_plasticity(acts)
    for c in st.components:
        for li, lay in enumerate(st.layers):
            name = st.modules[c][lay][0]
            k = f"{lay}.{c}.{name}"
            want = (profiler_peers.eager_distance(outs[0][k].double(), outs[1][k].double()) / d_in).mean()
            got = res.mean(c)[li].item()
            assert got == pytest.approx(want.item(), rel=1e-4), (c, li)


def test_paper_host_bytes_counts_every_output_of_both_halves(tiny):
    model, images, st = tiny
    # per block and half (3 sequences of 5 tokens): LN1, MHA, LN2, FC2 of width 192, FC1 of width 768
    per_block = 3 * 5 * (4 * 192 + 768) * 4
    assert profiler_peers.paper_host_bytes(model, images, st) == 2 * 2 * per_block


def test_paper_protocol_one_block_is_flagged_as_estimate(tiny):
    model, images, st = tiny
    full = profiler_peers.paper_protocol(model, images, st)
    est = profiler_peers.paper_protocol(model, images, st, blocks=1)
    assert not full["estimated"] and full["n_rates"] == 10 and full["blocks_run"] == 2
    assert est["estimated"] and est["n_rates"] == 5 and est["blocks_run"] == 1
    assert est["seconds"] == pytest.approx(est["embed_s"] + 2 * est["blocks_s"])


def test_layer_times_cover_every_layer_and_component(tiny):
    model, images, st = tiny
    for protocol in (None, "in_situ"):
        lt = profiler.layer_times(model, images, st, reps=1, protocol=protocol)
        assert set(lt["per_layer"]) == {"0", "1"}
        assert set(lt["per_component"]) == set(st.components)
        for c in st.components:
            assert set(lt["per_component"][c]) == {"0", "1"}
        # components run inside their block: their times cannot add up to more than the block's
        for lay, t in lt["per_layer"].items():
            assert t > 0
            assert sum(lt["per_component"][c][lay] for c in st.components) <= t * 1.05 + 1e-4


def test_reduction_rate_counts_distinct_tensors_once(tiny):
    model, images, st = tiny
    r = profiler.reduction_rate(model, images, st, reps=1)
    # pre-norm block: x, LN1 out (= MHA in), MHA out, LN2 in, LN2 out (= FC1 in), FC1 out, FC2 in, FC2 out
    assert r["tensors"] == 8
    assert r["bytes"] == 6 * 5 * (6 * 192 + 2 * 768) * 4
    assert r["GBps"] > 0


def test_cli_writes_json_table_and_plot(tmp_path, capsys):
    rc = cli.main(["profile", *TINY, "--batch-size", "4", "--out", str(tmp_path)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "capture adds" in printed and "paper's protocol would hold" in printed
    rec = json.loads((tmp_path / "profile.json").read_text())
    assert set(rec["variants"]) == {"forward", "capture", "naive_hooks", "paper"}
    for v in rec["variants"].values():
        assert v["seconds"] > 0 and v["images_per_s"] == pytest.approx(4 / v["seconds"])
    assert rec["paper"]["mode"] == "full" and not rec["paper"]["estimated"]
    assert rec["layers"] == 2 and rec["component_modules"] == 10
    assert set(rec["layer_times"]["capture"]["per_layer"]) == {"0", "1"}
    assert (tmp_path / "profile_layers.png").stat().st_size > 1000


def test_cli_rejects_odd_batch_for_halves(tmp_path, capsys):
    rc = cli.main(["profile", *TINY, "--batch-size", "3", "--out", str(tmp_path)])
    assert rc == 2
    assert "--batch-size" in capsys.readouterr().err
    assert not (tmp_path / "profile.json").exists()


def test_python_call_with_autocast_records_it(tmp_path):
    from vitplast.profile import ProfileOptions, profile

    lines = []
    rec = profile(model="vit_tiny_patch16_224", device="cpu", img_size=32, depth=1, reps=1, threads=1,
                  batch_size=4, amp="bf16", paper="skip", no_layers=True, out=str(tmp_path / "p"),
                  reporter=collecting(lines))
    assert rec["amp"] == "bf16" and rec["dtype"] == "float32" and rec["args"]["amp"] == "bf16"
    assert set(rec["variants"]) == {"forward", "capture", "naive_hooks"}
    assert any("float32 under bf16 autocast" in ln for ln in lines)
    assert json.loads((tmp_path / "p" / "profile.json").read_text())["amp"] == "bf16"
    opts = ProfileOptions(device="cpu")  # built without its checks: profile() runs them
    with pytest.raises(ValueError, match="--batch-size 3: must be even"):
        profile(opts, batch_size=3, reporter=quiet())
    assert opts.model is None  # the caller's object is left as it was


def test_profile_flags_come_from_the_runtime_group():
    import argparse

    from vitplast.profile import command

    parser = argparse.ArgumentParser(prog="vitplast profile")
    command.add_arguments(parser)
    text = parser.format_help()
    assert "--amp" in text and "--device" in text and "--dtype" in text
    assert "--progress" not in text  # profile draws no progress bars
