"""The Python API at ``vitplast``: the docs page's own script (`vitplast.score` on a timm model) runs as
written, ``import vitplast`` stays light, and the commands' packages are the functions too."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "python-api.md"


def _snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


@pytest.mark.slow  # a forward and a backward of a ViT at 224 px
def test_the_docs_page_scores_a_timm_model_as_written(capsys):
    namespace: dict = {}
    exec(compile(_snippets()[0], str(PAGE), "exec"), namespace)
    frame = namespace["frame"]
    assert list(frame.columns) == ["criterion", "component", "layer", "value"]
    assert set(frame["criterion"]) == {"rgn", "size"}
    assert set(frame["component"]) == {"LN1", "MHA", "LN2", "FC1", "FC2"} and len(frame) == 2 * 5 * 12
    size = frame[frame.criterion == "size"].set_index(["component", "layer"])["value"]
    net = namespace["model"]
    mha = [p.numel() for n, p in net.named_parameters() if n.startswith("blocks.0.attn.")]
    assert size["MHA", "0"] == sum(mha)
    assert frame[frame.criterion == "rgn"]["value"].gt(0).all()
    assert "MHA" in capsys.readouterr().out


def test_score_takes_a_loader_and_refuses_missing_labels():
    import timm
    import vitplast

    net = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                            num_classes=4)
    images, labels = torch.randn(8, 3, 32, 32), torch.randint(0, 4, (8,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=4)
    a = vitplast.score(net, loader, criteria=["plasticity", "cka"])
    b = vitplast.score(net, images, labels, criteria=("plasticity", "cka"), batch_size=4)
    for n in ("plasticity", "cka"):
        torch.testing.assert_close(torch.as_tensor(a[n].values), torch.as_tensor(b[n].values))
    assert a["plasticity"].measurement.n_pairs("MHA").tolist() == [4, 4]  # 2 per batch of 4, halves
    assert list(a["cka"].to_dataframe().columns) == ["component", "layer", "score"]
    with pytest.raises(ValueError, match="rgn read labels"):
        vitplast.score(net, images, criteria=["rgn"])
    with pytest.raises(ValueError, match="unknown criterion 'nope'"):
        vitplast.score(net, images, criteria=["nope"])


def test_import_vitplast_is_light():
    code = "import sys, vitplast; print([m for m in ('torch', 'timm', 'pandas') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["[]"]


def test_the_commands_packages_are_their_functions(monkeypatch):
    import vitplast
    import vitplast.claim
    import vitplast.finetune
    import vitplast.measure

    assert vitplast.score.__module__ == "vitplast.api"
    assert vitplast.measure.MeasureOptions.__name__ == "MeasureOptions"
    for package, name in (("measure", "measure_scores"), ("finetune", "finetune"), ("claim", "claim")):
        module = getattr(vitplast, package)
        monkeypatch.setattr(module, name, lambda *a, **k: (a, k))
        assert module("opts", out="x") == (("opts",), {"out": "x"})
