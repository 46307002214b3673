"""--pretrained without a reachable hub fails fast: the hub is asked once for a connection (a few
seconds), then only the local cache is read, and the message names HF_HUB_OFFLINE and the cache. The
unreachable hub is simulated: every TCP connection hangs until its timeout, as behind a firewall that
drops packets."""

from __future__ import annotations

import socket
import time

import pytest
from vitplast.models import hub
from vitplast.models.builder import build_model
from vitplast.options.groups import ModelOptions


@pytest.fixture
def unreachable_hub(tmp_path, monkeypatch):
    """An empty hub cache, offline mode off, and a network where connections hang until their timeout."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
                 "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub, "_PROBED", {}, raising=False)  # the hub asked afresh

    def hang(address, timeout=None, *args, **kwargs):
        time.sleep(min(timeout if timeout is not None else 60.0, 60.0))
        raise TimeoutError(f"timed out connecting to {address}")

    monkeypatch.setattr(socket, "create_connection", hang)
    return cache


@pytest.mark.slow
def test_pretrained_without_a_hub_fails_within_10_s_naming_the_cache(unreachable_hub):
    random_init = ModelOptions(model="vit_tiny_patch16_224", random_init=True)
    build_model(random_init.model_request(), 10)  # imports, not timed
    start = time.monotonic()
    with pytest.raises(ValueError) as info:
        pretrained = ModelOptions(model="vit_tiny_patch16_224.augreg_in21k", pretrained=True)
        build_model(pretrained.model_request(), 10)
    elapsed = time.monotonic() - start
    text = str(info.value)
    assert elapsed < 10, f"{elapsed:.1f} s before the message"
    assert "HF_HUB_OFFLINE" in text and str(unreachable_hub) in text and "cannot be reached" in text, text
