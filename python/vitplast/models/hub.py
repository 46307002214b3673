"""The Hugging Face hub's local cache, as the model loaders read it: which file of a repository is cached
(`cached_hub_file`, with the snapshot's revision), the revision of a snapshot folder
(`snapshot_revision`), and what a failed hub lookup means, in one line (`hub_error`).
Nothing here reaches the network."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def split_revision(repo_id: str) -> tuple[str, str | None]:
    """``"org/name@rev"`` -> ``("org/name", "rev")``; without ``@``, the revision is None."""
    repo, sep, revision = repo_id.partition("@")
    return repo, (revision or None) if sep else None


def snapshot_revision(path: str | os.PathLike) -> str | None:
    """The revision (commit hash) of a file or folder inside a hub cache snapshot
    (``models--ORG--NAME/snapshots/<revision>/...``), or None elsewhere."""
    parts = Path(path).expanduser().absolute().parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith("models--"):
            return parts[i + 1]
    return None


def cached_hub_file(repo_id: str, filenames: Sequence[str], revision: str | None = None) -> dict:
    """``{"file": path, "revision": rev}`` of the first of ``filenames`` the local cache holds for
    ``repo_id`` (``{"revision": revision}`` when none is)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return {"revision": revision}
    for name in filenames:
        found = try_to_load_from_cache(repo_id, name, revision=revision)
        if isinstance(found, str):
            return {"file": found, "revision": snapshot_revision(found) or revision}
    return {"revision": revision}


def hub_error(exc: BaseException) -> str | None:
    """What a failed Hugging Face hub lookup means (a file not in the local cache while offline, an
    unreachable hub, an unknown repository), in one line; None for other errors."""
    try:
        from huggingface_hub import constants, errors
    except ImportError:
        return None
    offline = bool(constants.HF_HUB_OFFLINE)
    where = f"the Hugging Face cache ({constants.HF_HUB_CACHE})"
    if isinstance(exc, errors.LocalEntryNotFoundError):
        why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
        return (f"not in {where} and {why}; download it once where the hub is reachable (e.g. `hf download "
                "REPO`), or point HF_HUB_CACHE at a cache that holds it")
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return f"not in {where} and HF_HUB_OFFLINE is set"
    if isinstance(exc, errors.RepositoryNotFoundError):
        return "no such repository on the Hugging Face hub (or it is private: log in with `hf auth login`)"
    if isinstance(exc, errors.EntryNotFoundError):
        text = str(exc).strip()
        return f"the repository has no such file ({text.splitlines()[0][:200] if text else ''})"
    if isinstance(exc, errors.HfHubHTTPError):
        return f"the Hugging Face hub answered with an error: {str(exc).strip().splitlines()[0][:200]}"
    return None
