"""The criteria by name: `CRITERIA` (one line each), `get_criterion`. Adding a criterion is one module with a
`Criterion` subclass and one line here."""

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
