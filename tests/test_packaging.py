"""Every Python package of the source tree is listed in pyproject.toml (a wheel holds only the listed
ones: a package missing there imports in an editable checkout and fails after `pip install`), and the
shipped digits checkpoint is declared as package data."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_and_the_checkpoint_is_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for name, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert found - listed == set(), "packages missing from pyproject.toml"
    assert listed - found == set(), "pyproject.toml lists packages that do not exist"
    assert "shipped/*.safetensors" in config["package-data"]["vitplast.models"]
