"""The one torch._dynamo setting the package touches: never at import; while a capture is attached
``skip_nnmodule_hook_guards`` is False; the last detach gives back torch's value, unless the user set
the flag themselves."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import weakref

import pytest
import torch
from torch import nn

import vitplast_kernels as vk
from vitplast_kernels.measure import hook_guards


def _model() -> nn.Module:
    return nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 4))


def _capture() -> vk.Capture:
    return vk.capture(_model(), components={"LN1": "0", "FC1": "1"})


def _flag() -> bool:
    return torch._dynamo.config.skip_nnmodule_hook_guards


@pytest.mark.slow
def test_import_leaves_dynamo_config_untouched():
    """A fresh interpreter: torch._dynamo's whole config is the same before and after importing the
    kernels and the applications' integrations."""
    code = textwrap.dedent("""
        import torch, torch._dynamo
        before = torch._dynamo.config.get_config_copy()
        import vitplast_kernels, vitplast_kernels.measure, vitplast.integrations
        after = torch._dynamo.config.get_config_copy()
        changed = sorted(k for k in before if before[k] != after.get(k))
        assert not changed, changed
        assert torch._dynamo.config.skip_nnmodule_hook_guards is True
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.fixture(autouse=True)
def _alone(monkeypatch):
    """No capture of another test counts as attached (one never detached holds the flag until collected)."""
    monkeypatch.setattr(hook_guards, "_attached", weakref.WeakSet())
    monkeypatch.setattr(hook_guards, "_set_by_us", False)


@pytest.fixture
def torch_default():
    """torch's own value of the flag for the test (and whatever the test did undone after it)."""
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=True):
        yield


def test_set_while_attached_and_restored_at_the_last_detach(torch_default):
    a, b = _capture(), _capture()
    assert _flag() is True
    a.attach()
    assert _flag() is False and hook_guards.hook_guards_active()
    with b:
        assert _flag() is False
    assert _flag() is False  # a is still attached
    a.detach()
    assert _flag() is True
    a.detach()  # detaching again changes nothing
    assert _flag() is True


def test_a_monitor_sets_it_too(torch_default):
    mon = vk.monitor(_model(), every=2, components={"LN1": "0"})
    assert _flag() is False
    mon.detach()
    assert _flag() is True


def test_the_users_false_is_left_alone():
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        with _capture():
            assert _flag() is False
        assert _flag() is False


def test_a_value_the_user_sets_while_attached_is_kept(torch_default):
    cap = _capture().attach()
    torch._dynamo.config.skip_nnmodule_hook_guards = True  # the user's own choice, mid-way
    cap.detach()
    assert _flag() is True
    cap.attach()
    assert _flag() is False  # a new attach sets it again
    torch._dynamo.config.skip_nnmodule_hook_guards = False  # cannot be told from the attach's own False
    cap.detach()
    assert _flag() is True
