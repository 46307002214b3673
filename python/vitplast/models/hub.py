"""The Hugging Face hub's local cache, as the model loaders read it: which file of a repository is cached
(`cached_hub_file`, with the snapshot's revision), the revision of a snapshot folder
(`snapshot_revision`), and what a failed hub lookup means, in one line (`hub_error`).
Nothing here reaches the network."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

PROBE_TIMEOUT_S = 3.0  # how long `hub_reachable` waits for the hub to accept a connection
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_PROBED: dict[str, bool] = {}  # endpoint -> reachable: asked once per process
# what to do about a file the cache lacks
GET_IT = ("download it once where the hub is reachable (e.g. `hf download REPO`), or point HF_HUB_CACHE at a "
          "cache that holds it")


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


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the Hugging Face hub (``HF_ENDPOINT``) accepts a TCP connection within ``timeout``
    seconds (asked once per process). True behind a proxy (``HTTPS_PROXY``, ...), which the probe cannot
    judge: the hub client then finds out itself."""
    from huggingface_hub import constants

    if any(os.environ.get(v) for v in PROXY_VARIABLES):
        return True
    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    key = f"{host}:{port}"
    if key not in _PROBED:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                _PROBED[key] = True
        except OSError:  # no route, no name resolution, refused, timed out
            _PROBED[key] = False
    return _PROBED[key]


@contextlib.contextmanager
def offline_unless_reachable() -> Iterator[None]:
    """Hub loads inside this block read only the local cache when the hub cannot be reached, instead
    of retrying for a minute: ``HF_HUB_OFFLINE`` is switched on for them (and restored after), and
    `hub_error` then says the hub was unreachable and names ``HF_HUB_OFFLINE`` and the cache."""
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = saved or not hub_reachable()
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved


def hub_error(exc: BaseException) -> str | None:
    """What a failed Hugging Face hub lookup means (a file not in the local cache while offline, an
    unreachable hub, an unknown repository), in one line; None for other errors."""
    try:
        from huggingface_hub import constants, errors
    except ImportError:
        return None
    where = f"the Hugging Face cache ({constants.HF_HUB_CACHE})"
    # `hub_reachable` found the hub unreachable in this process
    if (not os.environ.get("HF_HUB_OFFLINE") and not all(_PROBED.values())
            and isinstance(exc, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled))):
        return (f"not in {where}, and the hub ({constants.ENDPOINT}) cannot be reached (no connection within "
                f"{PROBE_TIMEOUT_S:g} s), so only the cache was read, as with HF_HUB_OFFLINE=1; {GET_IT}")
    if isinstance(exc, errors.LocalEntryNotFoundError):
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
        return f"not in {where} and {why}; {GET_IT}"
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
