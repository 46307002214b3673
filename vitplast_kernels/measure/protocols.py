"""Capture protocols as strategy objects: which hooks a protocol registers and what each one reduces.

- `InSitu` (``"in_situ"``): forward hooks on every component module. Component ``c`` of layer
  ``l`` has rate ``||c(x) - c(y)|| / ||x - y||`` for the tensors it really receives and returns.
- `Decomposition` (``"decomposition"``, the paper's): every component of every layer is applied
  to the same input ``e``, the embedding output. A forward pre-hook on each component calls it once more
  on ``e`` (FC2: ``e`` zero-padded to its input width), reduces the output, drops it.

Hook bodies are plain tensor code over per-forward Python structure held by the capture, so
``torch.compile`` traces them into the model's graph (no graph break); the capture's ``enabled`` flag
is read first, so a disabled capture adds nothing to the traced graph. A protocol sees the capture only
through `CaptureView`.
"""

from __future__ import annotations

import functools
from typing import Any
from typing import Protocol as _Interface

import torch

from .module_io import first_tensor, in_width, input_of


class CaptureView(_Interface):
    """What a protocol uses of a `Capture` (which imports this
    module, hence an interface rather than the class)."""

    components: tuple[str, ...]
    embedding: str | None

    def live(self) -> bool:
        """Whether a component hook measures now (enabled, not inside the decomposition's extra call)."""

    @property
    def forward_state(self) -> Any:
        """The running forward's ``e``, ``s_e``, ``e_skipped`` and ``extra_call``."""

    def module(self, name: str) -> torch.nn.Module:
        """The model's submodule called ``name``."""

    def counts_forward(self, ci: int, li: int) -> bool:
        """Whether the hook of row ``(ci, li)`` counts its forward (``counts_skip`` of `reduce`)."""

    def reduce(self, li: int, items: list[tuple[int, str, torch.Tensor]], where: str, *,
               share: bool = True, counts_skip: bool = False) -> list[torch.Tensor | None]:
        """Per-pair sums of ``(component, end, tensor)`` items of layer ``li`` (None: batch skipped)."""

    def add_row(self, ci: int, li: int, nparts: int, s_in: torch.Tensor, s_out: torch.Tensor) -> None:
        """Adds the row of component ``ci``, layer ``li`` from its input and output sums."""


class Protocol:
    """Interface of a capture protocol (one instance per capture)."""

    name: str = "?"

    def register(self, cap: CaptureView, module: torch.nn.Module, name: str, ci: int, li: int,
                 nparts: int) -> Any:
        """Registers the hook measuring component ``ci`` of layer ``li`` on ``module``; returns its handle."""
        raise NotImplementedError

    def register_root(self, cap: CaptureView) -> list[Any]:
        """Hooks beyond the components' (the embedding's, for decomposition)."""
        return []


class InSitu(Protocol):
    name = "in_situ"

    def register(self, cap, module, name, ci, li, nparts):
        fn = functools.partial(self._hook, cap, ci, li, nparts, name, cap.counts_forward(ci, li))
        return module.register_forward_hook(fn, with_kwargs=True)

    @staticmethod
    def _hook(cap: CaptureView, ci, li, nparts, name, counts, module, args, kwargs, output) -> None:
        if not cap.live():
            return
        x, y = input_of(args, kwargs), first_tensor(output)
        if x is None or y is None:
            raise TypeError(
                f"capture: {name} ({type(module).__name__}) has no tensor input or output to measure")
        s_in, s_out = cap.reduce(li, [(ci, "in", x), (ci, "out", y)], name, counts_skip=counts)
        if s_in is not None:
            cap.add_row(ci, li, nparts, s_in, s_out)


class Decomposition(Protocol):
    name = "decomposition"

    def __init__(self, embedding: str, is_input: bool) -> None:
        self.embedding, self.is_input = embedding, is_input

    def register(self, cap, module, name, ci, li, nparts):
        pad = in_width(module, name) if cap.components[ci] == "FC2" else None
        fn = functools.partial(self._hook, cap, ci, li, nparts, name, pad)
        return module.register_forward_pre_hook(fn, with_kwargs=True)

    def register_root(self, cap):
        emb = cap.module(self.embedding)
        if self.is_input:
            def on_input(module, args, kwargs):
                self._set_e(cap, input_of(args, kwargs))
            return [emb.register_forward_pre_hook(on_input, with_kwargs=True)]

        def on_output(module, args, output):
            self._set_e(cap, first_tensor(output))
        return [emb.register_forward_hook(on_output)]

    def _set_e(self, cap: CaptureView, e: torch.Tensor | None) -> None:
        if not cap.live():
            return
        if e is None:
            raise TypeError(f"capture: embedding {self.embedding} has no tensor to use as e")
        f = cap.forward_state
        # e is reached once per forward: it counts the skipped ones
        (f.s_e,) = cap.reduce(-1, [(-1, "e", e)], f"embedding {self.embedding}", share=False,
                              counts_skip=True)
        f.e_skipped = f.s_e is None
        f.e = None if f.e_skipped else e.detach()

    @staticmethod
    def _hook(cap: CaptureView, ci, li, nparts, name, pad, module, args, kwargs) -> None:
        f = cap.forward_state
        if not cap.live() or f.e_skipped:
            return
        e = f.e
        if e is None or f.s_e is None:
            raise RuntimeError(
                f"protocol='decomposition': {name} ran before the embedding {cap.embedding!r} produced e "
                "(pass embedding= naming the module whose output, or ':input', enters the first layer)"
            )
        if pad is not None:
            if pad < e.shape[-1]:
                raise ValueError(
                    f"{name} takes {pad} channels, fewer than e's {e.shape[-1]}: cannot zero-pad")
            e = torch.nn.functional.pad(e, (0, pad - e.shape[-1]))
        # e replaces the input everywhere it is passed (self-attention: query = key = value)
        x = input_of(args, kwargs)
        args = tuple(e if a is x else a for a in args) if args else (e,)
        kwargs = {k: (e if v is x else v) for k, v in kwargs.items()}
        f.extra_call = True
        try:
            with torch.no_grad():
                if module.training and not torch.compiler.is_compiling():
                    # the extra call may draw random numbers (dropout): fork the generators so that the
                    # real forward draws exactly what it would without capture
                    devices = [e.device] if e.device.type == "cuda" else []
                    with torch.random.fork_rng(devices=devices):
                        y = first_tensor(module(*args, **kwargs))
                else:
                    y = first_tensor(module(*args, **kwargs))
        finally:
            f.extra_call = False
        if y is None:
            raise TypeError(f"capture: {name} ({type(module).__name__}) returned no tensor")
        (s_out,) = cap.reduce(li, [(ci, "out", y)], name, share=False)
        cap.add_row(ci, li, nparts, f.s_e, s_out)


def make_protocol(protocol: str, embedding: str | None, is_input: bool) -> Protocol:
    if protocol == "in_situ":
        return InSitu()
    assert embedding is not None
    return Decomposition(embedding, is_input)
