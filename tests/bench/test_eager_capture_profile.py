"""bench/eager_capture_profile.py and bench/hook_overhead.py: short runs on small ViTs print every line with
sane numbers, and the profile puts back what it wrapped (fast, CPU)."""

from __future__ import annotations

import re

import pytest

from bench import eager_capture_profile
from vitplast_kernels.measure import protocols

pytest.importorskip("timm")


def test_profile_prints_its_breakdown_and_restores_the_hooks(capsys, monkeypatch):
    monkeypatch.setattr(eager_capture_profile, "read_bandwidth", lambda device: 40e9)  # no 512 MiB probe
    hook = protocols.InSitu.__dict__["_hook"]  # a staticmethod: put back as one, or hooks get a self
    assert eager_capture_profile.main(["--model", "vit_tiny_patch16_224", "--batch", "2", "--rounds", "1",
                                       "--allocator", "default"]) == 0
    out = capsys.readouterr().out
    assert protocols.InSitu.__dict__["_hook"] is hook
    plain = float(re.search(r"plain forward\s+([\d.]+) ms", out).group(1))
    hooks = float(re.search(r"inside the hooks\s+([\d.]+) ms", out).group(1))
    op = float(re.search(r"paired-op calls\s+([\d.]+) ms", out).group(1))
    assert plain > 0 and 0 < op <= hooks
    # vit_tiny: 12 blocks x 5 components, 5 calls per block (LN1's output is MHA's input, LN2's FC1's);
    # each reads its tensors once: 14 tensor widths of (2, 197, 192) float32 per block (FC1's out and
    # FC2's in are 4 wide)
    calls, mb = re.search(r"the (\d+) paired-op calls read (\d+) MB per forward", out).groups()
    assert int(calls) == 60
    assert int(mb) == round(12 * 14 * 2 * 197 * 192 * 4 / 1e6)
    assert re.search(r"at the machine's read bandwidth \(40\.0 GB/s", out)


def test_step_parts_split_the_added_time_and_restore_what_they_wrap():
    import timm
    import torch

    from bench.capture_step_parts import PARTS, step_parts

    model = timm.create_model("vit_small_patch16_224", img_size=32, patch_size=16, depth=12, embed_dim=64,
                              num_heads=2, num_classes=10, pretrained=False).eval()
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    hook = protocols.InSitu.__dict__["_hook"]
    parts = step_parts(model, images, reps=1)
    assert protocols.InSitu.__dict__["_hook"] is hook
    assert not any("forward" in m.__dict__ for m in model.modules())  # the timed forwards removed
    assert set(parts) == {"added", *PARTS, "residual", "faults"}
    assert all(parts[k] > 0 for k in ("op_calls", "bookkeeping", "setup", "result")), parts
    assert parts["residual"] == pytest.approx(parts["added"] - sum(parts[k] for k in PARTS))


@pytest.mark.slow  # 2-6 s: make test-fast stays under 2 minutes; CI runs it
def test_hook_overhead_reports_sixty_hooks_and_a_positive_cost(capsys):
    from bench import hook_overhead

    r = hook_overhead.per_hook_us(forwards=20, clock="wall")
    assert r["hooks"] == 60 and r["disabled_us"] > 0 and r["enabled_us"] > r["disabled_us"]
    assert hook_overhead.main(["--forwards", "5"]) == 0
    assert re.search(r"60 hooks, medians of 5 alternations: .* us per hook", capsys.readouterr().out)
