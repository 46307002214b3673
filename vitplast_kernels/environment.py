"""The environment variables the library reads, each when it is used (never at import), and what each
accepts. A value outside that raises ``ValueError`` naming the variable and what it accepts.

- ``VITPLAST_COMPILED_REDUCTION``: ``inductor`` or ``kernel`` (unset: the default choice of
  `vitplast_kernels.ops.paired.compiler_reduces`);
- ``VITPLAST_GPU_BACKEND``: ``cuda``, ``triton`` or ``torch`` (unset: the fastest measured);
- ``VITPLAST_AUTOTUNE``: on for ``1``, ``true``, ``yes``; off for ``0``, ``false``, ``no`` or unset.

`check_environment` checks all of them at once (the ``vitplast`` commands call it when they start).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

COMPILED_REDUCTION = "VITPLAST_COMPILED_REDUCTION"
GPU_BACKEND = "VITPLAST_GPU_BACKEND"
AUTOTUNE = "VITPLAST_AUTOTUNE"

CHOICES = {COMPILED_REDUCTION: ("inductor", "kernel"), GPU_BACKEND: ("cuda", "triton", "torch")}
TRUE, FALSE = ("1", "true", "yes"), ("0", "false", "no")


def _value(name: str, env: Mapping[str, str] | None) -> str:
    return (os.environ if env is None else env).get(name, "").strip().lower()


def choice(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The value of the choice variable ``name`` (one of `CHOICES`), None when unset or empty."""
    value = _value(name, env)
    if not value:
        return None
    if value not in CHOICES[name]:
        accepted = ", ".join(repr(c) for c in CHOICES[name])
        raise ValueError(f"{name}={value!r}: must be one of {accepted} (or unset)")
    return value


def switch(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether the on/off variable ``name`` is on (``1``/``true``/``yes``; off: ``0``/``false``/``no``
    or unset)."""
    value = _value(name, env)
    if value in TRUE:
        return True
    if value in FALSE or not value:
        return False
    raise ValueError(f"{name}={value!r}: must be one of {', '.join(TRUE + FALSE)} (or unset)")


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Raises ``ValueError`` naming the first variable of the library whose value it does not accept."""
    choice(COMPILED_REDUCTION, env)
    choice(GPU_BACKEND, env)
    switch(AUTOTUNE, env)
