"""The criteria by name: `CRITERIA` (one line each), `get_criterion`, `parse_criteria`.
Adding a criterion is one module with a `Criterion` subclass and one
line here."""

from __future__ import annotations

from .base import Criterion
from .cka import CKA
from .fisher import Fisher
from .plasticity import Plasticity
from .rgn import RGN
from .size import Size
from .spectral import Spectral

CRITERIA: dict[str, type[Criterion]] = {
    "plasticity": Plasticity,
    "rgn": RGN,
    "fisher": Fisher,
    "cka": CKA,
    "spectral": Spectral,
    "size": Size,
}


def get_criterion(name: str) -> Criterion:
    """A new criterion by name; ValueError naming the known ones."""
    try:
        return CRITERIA[name]()
    except KeyError:
        raise ValueError(f"unknown criterion {name!r}; known: {', '.join(CRITERIA)}") from None


def parse_criteria(text: str | list | tuple) -> tuple[str, ...]:
    """``"rgn,size"`` (or a list) -> ``("rgn", "size")``, checked, duplicates dropped, order kept."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = tuple(dict.fromkeys(s.strip().lower() for s in items if s.strip()))
    if not names:
        raise ValueError(f"no criterion named; known: {', '.join(CRITERIA)}")
    for n in names:
        if n not in CRITERIA:
            raise ValueError(f"unknown criterion {n!r}; known: {', '.join(CRITERIA)}")
    return names
