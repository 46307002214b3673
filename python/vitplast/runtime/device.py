"""The one device resolution of the commands: ``--device`` is ``auto`` (CUDA when available, else the
CPU), ``cpu``, ``cuda`` or ``cuda:N``; `check_device` validates it (one wording for every
command), `resolve_device` turns it into a ``torch.device``."""

from __future__ import annotations

DEVICE_FORMS = "auto, cpu, cuda, cuda:1, ..."


def check_device(text: str) -> str:
    """``text`` when it names a device this machine has; ValueError otherwise."""
    if text == "auto":
        return text
    import torch

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"not a device: {text!r} ({DEVICE_FORMS})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{text!r}: CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{text!r}: this machine has {torch.cuda.device_count()} GPU(s)")
    elif dev.type != "cpu":
        raise ValueError(f"device type {dev.type!r} is not supported (auto, cpu, cuda)")
    return text


def resolve_device(text: str, local_rank: int | None = None):
    """The ``torch.device`` of a ``--device`` value: ``auto`` is CUDA when available, else the CPU;
    under torchrun (``local_rank`` given) a bare ``cuda`` is this rank's GPU."""
    import torch

    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(text)
    if dev.type == "cuda" and dev.index is None and local_rank is not None:
        dev = torch.device("cuda", local_rank)
    return dev
