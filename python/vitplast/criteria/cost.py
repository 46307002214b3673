"""What scoring cost (`Cost`), reported by every criterion beside its scores."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Cost:
    """What scoring cost: wall ``seconds``, ``forwards`` and ``backwards`` (passes over a batch, or over
    one sample under ``vmap``, as counted by the criterion), ``peak_memory`` (bytes of device memory at
    the peak, CUDA only; None on the CPU)."""

    seconds: float = 0.0
    forwards: int = 0
    backwards: int = 0
    peak_memory: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
