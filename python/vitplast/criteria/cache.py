"""Scores cached by provenance: a key made of what a criterion's scores depend on (the model's
reproducibility record, library versions left out; the data; the options), stored in the result's
``meta["cache_key"]`` and compared when a command would score again."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping


def cache_key(record: Mapping, options: Mapping) -> str:
    """sha256 of ``record`` (a provenance record: model, weights' hash, data, transform; its
    ``versions`` left out) and ``options`` (the criterion's name and what changes its scores)."""
    prov = {k: v for k, v in record.items() if k != "versions"}
    text = json.dumps({"provenance": prov, "options": dict(options)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def cached(path: str | os.PathLike, key: str):
    """The ``CriterionResult`` saved at ``path`` when its ``meta["cache_key"]`` is ``key``, else None (no
    file, another key, or a file that is not a criterion result)."""
    from .result import CriterionResult

    try:
        saved = CriterionResult.from_json(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return saved if saved.meta.get("cache_key") == key else None
