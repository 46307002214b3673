"""models.timm_models.create_vit: random init warns, local checkpoints load exactly, head/size mismatches."""

from __future__ import annotations

import warnings

import pytest
import torch
from vitplast.models.timm_models import create_vit

TINY = dict(img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=2)
NAME = "vit_tiny_patch16_224"


def _tiny(num_classes=5, weights=None, **over):
    kw = {**TINY, **over}
    img = kw.pop("img_size")
    return create_vit(NAME, num_classes, img_size=img, weights=weights, **kw)


def _random_tiny(num_classes=5, **over):
    with pytest.warns(UserWarning, match="random init"):
        return _tiny(num_classes, **over)


def _same(a: torch.nn.Module, b: torch.nn.Module, skip=()) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa if not k.startswith(skip))


def test_random_init_warns_and_builds():
    m = _random_tiny(7)
    assert not m.training
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    assert len(m.blocks) == 2 and m.pos_embed.shape == (1, 17, 32)


def test_safetensors_roundtrip_is_exact(tmp_path):
    from safetensors.torch import save_file

    m = _random_tiny()
    save_file(m.state_dict(), str(tmp_path / "w.safetensors"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exact match loads silently
        m2 = _tiny(weights=str(tmp_path / "w.safetensors"))
    assert _same(m, m2)


def test_pth_with_wrappers_and_prefixes(tmp_path):
    m = _random_tiny()
    torch.save({"model": {"module." + k: v for k, v in m.state_dict().items()}}, tmp_path / "w.pth")
    torch.save({"state_dict": m.state_dict()}, tmp_path / "w2.pt")
    assert _same(m, _tiny(weights=str(tmp_path / "w.pth")))
    assert _same(m, _tiny(weights=str(tmp_path / "w2.pt")))


def test_head_mismatch_warns_and_keeps_the_rest(tmp_path):
    m = _random_tiny(10)
    torch.save(m.state_dict(), tmp_path / "w.pth")
    with pytest.warns(UserWarning, match="head"):
        m2 = _tiny(3, weights=str(tmp_path / "w.pth"))
    assert m2.head.weight.shape == (3, 32)
    assert _same(m, m2, skip=("head",))


def test_other_img_size_resamples_position_embeddings(tmp_path):
    m = _random_tiny()
    torch.save(m.state_dict(), tmp_path / "w.pth")
    m2 = _tiny(weights=str(tmp_path / "w.pth"), img_size=64)
    assert m2.pos_embed.shape == (1, 65, 32)
    assert torch.equal(m2.pos_embed[:, 0], m.pos_embed[:, 0])  # class token kept
    assert _same(m, m2, skip=("pos_embed",))
    assert m2(torch.randn(1, 3, 64, 64)).shape == (1, 5)


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="not a timm model"):
        create_vit("vit_no_such_model", 3)
    with pytest.raises(FileNotFoundError, match="weights"):
        _tiny(weights=str(tmp_path / "absent.safetensors"))
    (tmp_path / "w.onnx").write_bytes(b"x")
    with pytest.raises(ValueError, match="unknown checkpoint type"):
        _tiny(weights=str(tmp_path / "w.onnx"))
    torch.save({"foo.bar": torch.zeros(2)}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="shares no tensor"):
        _tiny(weights=str(tmp_path / "other.pth"))
    with pytest.raises(ValueError, match="num_classes"):
        create_vit(NAME, -1)


def test_npz_needs_a_model_with_an_npz_loader(tmp_path):
    import numpy as np
    from vitplast.models.weights import load_weights

    np.savez(tmp_path / "w.npz", a=np.zeros(2))
    with pytest.warns(UserWarning, match="random init"):
        resnet = create_vit("resnet10t", 3)
    with pytest.raises(ValueError, match="npz"):
        load_weights(resnet, tmp_path / "w.npz")
