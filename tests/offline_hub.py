"""A Hugging Face hub cache built by the tests, offline: timm's ``pretrained=True`` and transformers'
``from_pretrained`` really run, reading files the test wrote, and nothing is downloaded.

- `offline_cache`: an empty cache under a test's tmp dir, the hub switched offline and pointed at it
  (the environment for subprocesses, the already imported ``huggingface_hub`` constants for this one);
- `add_snapshot`: a repository snapshot as the hub client lays it out
  (``models--ORG--NAME/snapshots/<revision>/<files>``, ``refs/main`` naming the revision);
- `timm_config`: the ``config.json`` a timm hub repository holds.
"""

from __future__ import annotations

import json
from pathlib import Path

REVISION = "0123456789abcdef0123456789abcdef01234567"


def offline_cache(root: Path, monkeypatch) -> Path:
    """An empty hub cache ``root/hub`` that every hub lookup of this test reads, offline."""
    import huggingface_hub.constants as constants

    cache = root / "hub"
    cache.mkdir(parents=True, exist_ok=True)
    for name, value in (("HF_HOME", str(root)), ("HF_HUB_CACHE", str(cache)), ("HF_HUB_OFFLINE", "1"),
                        ("TRANSFORMERS_OFFLINE", "1"), ("HF_HUB_DISABLE_TELEMETRY", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HOME", str(root))
    return cache


def add_snapshot(cache: Path, repo: str, files: dict[str, bytes | str | dict],
                 revision: str = REVISION) -> Path:
    """The snapshot folder of ``repo`` at ``revision`` holding ``files`` (bytes, text, or a dict written as
    JSON), with ``refs/main`` naming it."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / revision
    snap.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = snap / name
        if isinstance(content, dict):
            path.write_text(json.dumps(content))
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(revision)
    return snap


def timm_config(architecture: str, pretrained_cfg: dict, num_classes: int = 10) -> dict:
    """A timm hub repository's ``config.json``."""
    return {"architecture": architecture, "num_classes": num_classes, "num_features": 192,
            "pretrained_cfg": {"num_classes": num_classes, "classifier": "head",
                               "first_conv": "patch_embed.proj", **pretrained_cfg}}
