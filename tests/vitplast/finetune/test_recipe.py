"""The training recipe is timm's: parameter groups follow timm's no-weight-decay rules (norms, biases,
position embeddings, class tokens), layer-wise lr decay scales each block, the default is the paper's
protocol (momentum SGD 0.9, cosine, clipping 1.0), the schedule warms up; --grad-accum gives the same
step in micro-batches; a run written before the recipe's options existed resumes only as it ran."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import quiet
from vitplast.finetune import finetune
from vitplast.finetune.model import make_optimizer, make_scheduler
from vitplast.finetune.options import RunSettings
from vitplast.options.groups import OptimOptions

TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            data="synthetic", model_kwargs=dict(patch_size=8, depth=3, embed_dim=32, num_heads=2))


def _vit():
    import timm

    return timm.create_model("vit_tiny_patch16_224", num_classes=4, img_size=16, patch_size=8, depth=3,
                             embed_dim=32, num_heads=2)


def _groups(opt, model) -> list[tuple[float, set[str]]]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [(g["weight_decay"], {names[id(p)] for p in g["params"]}) for g in opt.param_groups]


def test_parameter_groups_follow_timms_no_weight_decay_rules():
    model = _vit()
    opt = make_optimizer(OptimOptions(weight_decay=0.05), model, 0.01)
    decayed = set().union(*(n for wd, n in _groups(opt, model) if wd > 0))
    kept = set().union(*(n for wd, n in _groups(opt, model) if wd == 0))
    assert {"pos_embed", "cls_token", "blocks.0.norm1.weight", "blocks.0.norm1.bias",
            "blocks.0.attn.qkv.bias", "norm.weight", "head.bias"} <= kept
    tokens = ("pos_embed", "cls_token")
    assert decayed == {n for n, p in model.named_parameters() if p.ndim > 1 and n not in tokens}
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["momentum"] == 0.9
    assert not opt.defaults["nesterov"]
    for n, p in model.named_parameters():  # only what is trainable is optimised
        p.requires_grad_(n.startswith("blocks.1.attn") or n.startswith("head"))
    frozen = make_optimizer(OptimOptions(optimizer="adamw", weight_decay=0.05), model, 0.01)
    assert isinstance(frozen, torch.optim.AdamW)
    assert set().union(*(n for _, n in _groups(frozen, model))) == {
        n for n, p in model.named_parameters() if p.requires_grad}


def test_layer_decay_scales_each_block():
    model = _vit()
    opt = make_optimizer(OptimOptions(layer_decay=0.5), model, 0.01)
    scale = {n: g["lr_scale"] for g in opt.param_groups for n in _groups_names(g, model)}
    assert scale["head.weight"] == 1.0 and scale["blocks.2.attn.qkv.weight"] == 0.5
    assert scale["blocks.0.attn.qkv.weight"] == 0.125 and scale["patch_embed.proj.weight"] == 0.0625
    sched = make_scheduler(OptimOptions(layer_decay=0.5, schedule="constant"), opt)
    sched.step_update(3)
    assert {round(g["lr"] / g["lr_scale"], 12) for g in opt.param_groups} == {0.01}


def _groups_names(group, model):
    names = {id(p): n for n, p in model.named_parameters()}
    return [names[id(p)] for p in group["params"]]


def test_defaults_are_the_papers_protocol_and_the_schedule_warms_up():
    settings = RunSettings(**TINY)
    assert (settings.optimizer, settings.schedule, settings.grad_clip) == ("sgd", "cosine", 1.0)
    from vitplast.options.fields import resolve

    assert resolve(RunSettings, {**TINY, "grad_clip": "0"}).grad_clip is None  # 0: no clipping
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    sched = make_scheduler(OptimOptions(steps=10, warmup=2), opt)
    lrs = []
    for step in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step_update(step + 1)
    assert lrs[0] == pytest.approx(0.05) and lrs[1] > lrs[0] and lrs[2] == pytest.approx(0.1)
    assert all(a > b for a, b in zip(lrs[2:], lrs[3:], strict=False)) and lrs[-1] < 0.01


@pytest.mark.slow
def test_grad_accum_takes_the_same_steps(tmp_path):
    common = dict(**TINY, train="MHA", steps=3, batch_size=16, lr="0.05", monitor_every=0, export=True,
                  reporter=quiet())
    from safetensors.torch import load_file

    finetune(**common, out=str(tmp_path / "one"))
    finetune(**common, grad_accum=4, out=str(tmp_path / "four"))
    one = load_file(tmp_path / "one" / "model.safetensors")
    four = load_file(tmp_path / "four" / "model.safetensors")
    for k in one:
        torch.testing.assert_close(four[k], one[k], rtol=1e-4, atol=1e-5, msg=k)
    assert json.loads((tmp_path / "four" / "config.json").read_text())["grad_accum"] == 4
    with pytest.raises(ValueError, match="--grad-accum 3: must divide --batch-size 16"):
        finetune(**{**common, "grad_accum": 3}, out=str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_a_run_written_before_the_recipe_options_resumes_only_as_it_ran(tmp_path):
    from helpers import Killed, kill_after

    run = tmp_path / "run"
    opts = dict(**TINY, train="MHA", steps=4, batch_size=16, checkpoint_every=2, reporter=quiet())
    with pytest.raises(Killed):
        finetune(**opts, out=str(run), after_step=kill_after(2))
    config = json.loads((run / "config.json").read_text())
    for key in ("model_transform", "augment", "grad_accum", "layer_decay", "pretrained", "random_init",
                "mean", "std"):
        config.pop(key)
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="written before the options model_transform, augment existed; "
                                         "resuming it needs --no-model-transform, --no-augment"):
        finetune(**opts, out=str(run), resume=True)
    done = finetune(**opts, model_transform=False, augment=False, out=str(run), resume=True)
    assert done.runs[0].steps == 4
