"""The reproducibility record every output carries (``run.json``, ``summary.json``, ``profile.json``,
``claim.json``): what software computed it, which model with which weights, on which data, prepared how.

- `versions`: the versions of the package, Python, torch, timm and transformers (None for one not
  installed); ``vitplast --version`` prints them (`version_text`);
- `weights_record`: where a built model's weights came from (its ``origin``: a local file, timm's
  hub weights, a transformers folder, the digits ViT's cache, random init), with the sha256 of the file
  they were read from and the hub revision when there is one;
- `provenance`: the whole record of one model on one data set.

Hashes are computed once per file and process (keyed by the file's path, size and modification time).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models.hub import snapshot_revision

if TYPE_CHECKING:
    from ..models.builder import BuiltModel

PACKAGE = "vitplast-kernels"
LIBRARIES = ("torch", "timm", "transformers")
FOLDER_FILES = ("model.safetensors", "pytorch_model.bin", "checkpoint.pt")  # what a model folder loads
_HASHES: dict[tuple[str, int, int], str] = {}


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)  # looked up at each call (tests replace it)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """``{"vitplast-kernels", "python", "torch", "timm", "transformers"}``: each version, None when absent."""
    out: dict[str, str | None] = {PACKAGE: _version(PACKAGE), "python": platform.python_version()}
    for name in LIBRARIES:  # an imported module's own version (torch's names its build), else the metadata's
        module = sys.modules.get(name)
        out[name] = str(getattr(module, "__version__", "")) or _version(name)
    return out


def version_text() -> str:
    """One line: ``vitplast 1.2 (python 3.11.9, torch 2.5.1, timm 1.0.11, transformers not installed)``."""
    v = versions()
    rest = ", ".join(f"{k} {v[k] or 'not installed'}" for k in ("python", *LIBRARIES))
    return f"vitplast {v[PACKAGE] or 'unknown'} ({rest})"


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 (hex) of the file at ``path`` (links followed), read in 1 MiB blocks."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


def weights_file(origin: dict) -> Path | None:
    """The file the weights of ``origin`` were read from (a folder: the weights file it holds), or None
    (random init, a file not in the local cache)."""
    where = origin.get("file")
    if not where:
        return None
    p = Path(where).expanduser()
    if p.is_dir():
        return next((p / f for f in FOLDER_FILES if (p / f).is_file()), None)
    return p if p.is_file() else None


def weights_record(origin: dict) -> dict[str, Any]:
    """``origin`` (``kind``: random, pretrained, weights or digits; ``file``, ``hub_id``, ``revision``,
    ``dir`` where known) with the ``sha256`` of its weights file (None when there is no file)."""
    path = weights_file(origin)
    record = dict(origin, sha256=file_sha256(path) if path is not None else None)
    if path is not None and not record.get("revision"):
        record["revision"] = snapshot_revision(path)
    return record


def provenance(built: BuiltModel, data: dict[str, Any], transform: dict[str, Any] | None) -> dict[str, Any]:
    """The record of ``built`` (a `vitplast.models.builder.BuiltModel`) run on ``data`` (what the
    command says of its data: specs, split, sizes), its images prepared as ``transform`` says (the record
    of `vitplast.data.transforms.transform_record`; None: no images were prepared):
    ``{"versions", "model", "model_kwargs", "trust_remote_code", "weights", "data", "transform"}``
    (``trust_remote_code``: whether the model's own code was allowed to run, ``--trust-remote-code``)."""
    return {"versions": versions(), "model": built.name, "model_kwargs": dict(built.timm_kwargs),
            "trust_remote_code": bool(getattr(built, "trust_remote_code", False)),
            "weights": weights_record(built.origin), "data": dict(data), "transform": transform}
