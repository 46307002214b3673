"""`vitplast measure` on bad input: every case ends with one error line and exit status 2 (never a
traceback), checked before any work where the value allows it; weights that do not fit; checkpoints
written by `vitplast finetune` load; output sets are written as a unit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import vitplast.models.builder as model_builder
from helpers import image_folder, quiet
from vitplast.cli import build_parser, main
from vitplast.measure import measure
from vitplast.options.groups import ModelOptions

TIMM = ["--model", "vit_tiny_patch16_224", "--random-init", "--img-size", "32", "--no-progress"]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """An ImageFolder of 2 classes x 4 random 20x20 PNGs."""
    return image_folder(tmp_path_factory.mktemp("imgs"), 20, 20)


def _main(argv: list[str], capsys) -> tuple[int, str]:
    """Exit status and stderr of ``vitplast ARGV`` run in this process (argparse errors exit)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1, err
    return lines[0]


def _no_work(monkeypatch):
    def build(*a, **k):
        raise AssertionError("the model must not be built: the error is found before any work")

    build_parser()  # every command imported first, then each module that took build_model gets the stand-in
    original = model_builder.build_model
    for module in [m for m in sys.modules.values() if getattr(m, "build_model", None) is original]:
        monkeypatch.setattr(module, "build_model", build)


@pytest.mark.parametrize("argv,needle", [
    (["--img-size", "0"], "--img-size: must be a positive integer"),
    (["--batch-size", "1"], "--batch-size: images per batch must be in 2..65536"),
    (["--batch-size", "99999999999998"], "--batch-size: images per batch must be in 2..65536"),
    (["--batch-size", "3"], "--batch-size 3: must be even"),
    (["--batch-size", "x"], "expected an integer"),
    (["--batches", "0"], "--batches: must be a positive integer"),
    (["--seed", "-1"], "--seed: must be an integer in 0..4294967295"),
    (["--amp", "int8"], "--amp: must be one of none, bf16, fp16"),
    (["--device", "tpu"], "--device"),
    (["--device", "cuda:0"] if not torch.cuda.is_available() else ["--device", "cuda:99"], "--device"),
    (["--protocol", "paper"], "--protocol: must be one of in_situ, decomposition"),
    (["--pretrain-config", "{bad"], "not valid JSON"),
    (["--pretrain-config", "[1]"], "must be a JSON object"),
    (["--pretrain-config", '{"no_such_field": 1}'], "no_such_field"),
    (["--component", "MHA"], "expected LABEL=GLOB"),
    (["--component", "MHA=blocks.[0-2.attn"], "without a closing"),
    (["--embedding", "blocks.0"], "does not apply to protocol='in_situ'"),
    (["--img-size", "64"], "digits-vit takes 32x32"),
])
def test_bad_values_one_line_exit_2_before_any_work(argv, needle, capsys, monkeypatch):
    _no_work(monkeypatch)
    rc, err = _main(["measure", "--no-progress", *argv], capsys)
    assert rc == 2
    assert needle in _one_error_line(err), err


def test_help_shows_defaults_and_units(capsys):
    with pytest.raises(SystemExit):
        main(["measure", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "images per forward pass" in text and "(default: 128)" in text
    assert "(default: none)" in text and "(default: in_situ)" in text and "(default: 4)" in text


@pytest.mark.slow
def test_corrupt_png_names_the_file_or_is_skipped(images, tmp_path, capsys):
    bad = tmp_path / "imgs"
    for c in ("a", "b"):
        (bad / c).mkdir(parents=True)
        for i in range(4):
            (bad / c / f"{i}.png").write_bytes((images / c / f"{i}.png").read_bytes())
    (bad / "a" / "cut.png").write_bytes((images / "a" / "0.png").read_bytes()[:60])  # truncated
    (bad / "b" / "x.png").write_bytes(b"not a png")
    argv = ["measure", *TIMM, "--data", str(bad), "--batch-size", "2", "--batches", "5"]  # every image
    rc, err = _main(argv, capsys)
    assert rc == 2
    line = _one_error_line(err)
    assert "cannot read image" in line and str(bad) in line and "--skip-bad-images" in line
    out = tmp_path / "res"
    rc, _ = _main([*argv, "--skip-bad-images", "--out", str(out)], capsys)
    assert rc == 0
    run = json.loads((out / "run.json").read_text())
    assert run["bad_images"] == [str(bad / "a" / "cut.png"), str(bad / "b" / "x.png")]
    assert 1 <= run["batches"] <= 4


@pytest.mark.slow
@pytest.mark.parametrize("content", [b"", b"garbage", b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":",
                                     "truncated"])
def test_unreadable_safetensors(content, tmp_path, capsys, monkeypatch):
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    if content == "truncated":
        save_file({"a": torch.zeros(1000)}, str(path))
        path.write_bytes(path.read_bytes()[:-100])
    else:
        path.write_bytes(content)
    rc, err = _main(["measure", *TIMM, "--data", "synthetic", "--weights", str(path)], capsys)
    assert rc == 2
    assert "is not a readable .safetensors file" in _one_error_line(err)


@pytest.mark.slow
def test_pickle_with_other_objects_is_refused(tmp_path, capsys):
    path = tmp_path / "w.pth"
    torch.save({"model": {"x": torch.zeros(1)}, "cfg": Path("/x")}, path)
    rc, err = _main(["measure", *TIMM, "--data", "synthetic", "--weights", str(path)], capsys)
    assert rc == 2 and "holds Python objects other than tensors" in _one_error_line(err)


def test_out_existing_file_and_read_only_dir_before_any_work(tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    afile = tmp_path / "file"
    afile.write_text("x")
    rc, err = _main(["measure", *TIMM, "--data", "synthetic", "--out", str(afile)], capsys)
    assert rc == 2 and "is an existing file" in _one_error_line(err)
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        target = ro / "out"
    elif not os.access("/sys", os.W_OK) or subprocess.run(["mkdir", "/sys/vitplast-probe"],
                                                          capture_output=True).returncode != 0:
        target = Path("/sys/vitplast-out")  # root: sysfs refuses new directories
    else:
        pytest.skip("no read-only directory for root here")
    rc, err = _main(["measure", *TIMM, "--data", "synthetic", "--out", str(target)], capsys)
    assert rc == 2 and "cannot write into" in _one_error_line(err)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    rc, err = _main(["measure", *TIMM, "--data", "synthetic", "--out", str(other)], capsys)
    assert rc == 2 and "holds files this run did not write (notes.txt)" in _one_error_line(err)


@pytest.mark.slow
def test_model_without_preset(images, capsys):
    argv = ["measure", "--model", "resnet18", "--random-init", "--img-size", "32", "--data", str(images),
            "--no-progress", "--batch-size", "4", "--batches", "1"]
    rc, err = _main(argv, capsys)
    assert rc == 2 and "--component LABEL=GLOB" in _one_error_line(err)
    rc, _ = _main([*argv, "--component", "C1=layer[1-4].0.conv1", "--component", "C2=layer?.0.conv2"], capsys)
    assert rc == 0


@pytest.mark.slow
def test_weights_of_another_architecture(tmp_path, capsys):
    import timm
    from safetensors.torch import save_file

    small = timm.create_model("vit_small_patch16_224", img_size=32, depth=1, num_classes=2)
    save_file(small.state_dict(), str(tmp_path / "s.safetensors"))
    argv = ["measure", *TIMM, "--data", "synthetic", "--batch-size", "8", "--batches", "1",
            "--weights", str(tmp_path / "s.safetensors")]
    rc, err = _main(argv, capsys)
    line = _one_error_line(err)
    assert rc == 2 and "does not fit VisionTransformer" in line and "--allow-partial-weights" in line
    assert "besides the head would stay at random init" in line
    rc, _ = _main([*argv, "--allow-partial-weights"], capsys)
    assert rc == 0


TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            data="synthetic", steps=2, batch_size=8,
            model_kwargs=dict(patch_size=8, depth=2, embed_dim=32, num_heads=2))


@pytest.mark.slow
@pytest.mark.parametrize("train", ["FC1", "lora"])
def test_measure_loads_what_finetune_writes(train, tmp_path, capsys):
    from vitplast.finetune import finetune

    run = tmp_path / "run"
    finetune(**TINY, train=train, out=str(run), reporter=quiet())
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    for weights in (run, run / "checkpoint.pt"):
        rc, err = _main(["measure", "--weights", str(weights), "--data", "synthetic", "--batch-size", "8",
                         "--batches", "1", "--no-progress"], capsys)
        assert rc == 0, err
    arch = dict(model="vit_tiny_patch16_224", model_kwargs=TINY["model_kwargs"], img_size=16)
    net = model_builder.build_model(ModelOptions(**arch, weights=str(run)).model_request(), 4).net
    state = net.state_dict()
    if train == "lora":  # adapters merged as peft merges them
        from vitplast.finetune.lora import apply_lora

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            request = ModelOptions(**arch, random_init=True).model_request()
            ref = apply_lora(model_builder.build_model(request, 4).net)
        ref.load_state_dict(ckpt["model"])
        expected = ref.merge_and_unload().state_dict()
    else:
        expected = ckpt["model"]
    for k, v in expected.items():
        torch.testing.assert_close(state[k], v, rtol=1e-6, atol=1e-7, msg=k)


@pytest.mark.slow
def test_output_set_is_replaced_as_a_unit(tmp_path, monkeypatch):
    from vitplast_kernels import PlasticityResult

    out = tmp_path / "res"
    kw = dict(model="vit_tiny_patch16_224", random_init=True, img_size=32, data="synthetic", batches=1,
              batch_size=8, progress=False, reporter=quiet(), out=str(out))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        measure(seed=0, **kw)
        first = {p.name: p.read_bytes() for p in out.iterdir()}
        assert sorted(first) == ["plasticity.json", "plasticity.png", "plasticity_heatmap.png", "run.json"]

        def disk_full(self, path, **k):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(PlasticityResult, "plot", disk_full)
        with pytest.raises(OSError, match="No space"):
            measure(seed=1, **kw)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == first  # the old set, whole
        assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]   # no temporary left
        monkeypatch.undo()
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        (tmp_path / f".res.tmp-{dead.pid}-x").mkdir()  # left by a killed run
        measure(seed=1, **kw)
    run = json.loads((out / "run.json").read_text())
    files = ["plasticity.json", "plasticity.png", "plasticity_heatmap.png", "run.json"]
    assert run["seed"] == 1 and run["files"] == files
    assert json.loads((out / "plasticity.json").read_text()) != json.loads(first["plasticity.json"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]


@pytest.mark.parametrize("argv,needle", [
    (["--batch-size", "1"], "--batch-size: images per batch must be >= 2"),
    (["--batch-size", "3"], "--batch-size 3: must be even"),
    (["--dtype", "half"], "--dtype: must be one of float32, bfloat16, float16"),
    (["--reps", "0"], "--reps: must be a positive integer"),
    (["--depth", "0"], "--depth: must be a positive integer"),
    (["--img-size", "-3"], "--img-size: must be a positive integer"),
    (["--threads", "0"], "--threads: must be a positive integer"),
    (["--paper-max-gb", "nan"], "--paper-max-gb: must be a positive number"),
    (["--pairs", "some"], "--pairs: must be one of halves, all"),
    (["--model", "no_such_vit"], "is not a timm model name"),
])
def test_profile_bad_values_one_line_exit_2(argv, needle, tmp_path, capsys, monkeypatch):
    from vitplast.profile import profiler

    def no_timing(*a, **k):
        raise AssertionError("nothing is timed on bad input")

    monkeypatch.setattr(profiler, "time_variants", no_timing)
    rc, err = _main(["profile", "--device", "cpu", "--out", str(tmp_path / "p"), *argv], capsys)
    assert rc == 2 and needle in _one_error_line(err), err
    assert not (tmp_path / "p").exists()


def test_profile_defaults_follow_the_device(capsys):
    from vitplast.options.fields import resolve
    from vitplast.profile import ProfileOptions

    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "vit_base_patch16_224 on a GPU, vit_tiny_patch16_224 on a CPU" in text and "(default: 3)" in text
    cpu = resolve(ProfileOptions, {"device": "cpu"})
    assert (cpu.model, cpu.batch_size, cpu.dtype) == ("vit_tiny_patch16_224", 8, "float32")
    if torch.cuda.is_available():
        gpu = resolve(ProfileOptions, {"device": "cuda"})
        assert (gpu.model, gpu.batch_size, gpu.dtype, gpu.device) == ("vit_base_patch16_224", 64, "bfloat16",
                                                                      "cuda")
    auto = resolve(ProfileOptions, {})
    assert auto.device == ("cuda" if torch.cuda.is_available() else "cpu")
    mine = resolve(ProfileOptions, {"device": "cpu", "model": "m", "batch_size": 6, "dtype": "bf16"})
    assert (mine.model, mine.batch_size, mine.dtype) == ("m", 6, "bfloat16")
