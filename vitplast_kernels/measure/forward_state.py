"""The per-forward bookkeeping of a capture: which tensors of a layer were reduced, the rows waiting for
the end of the forward, partial components, ``e`` (decomposition).

Every update rebinds an attribute to a new container; no container is ever mutated in place. Under
``torch.compile`` this matters: a container that existed before a traced forward and was mutated in it
is rebuilt by Dynamo after the graph, so every tensor it held becomes an output of the graph (the
activations kept alive past the forward, and AOTAutograd's forward/backward partition changed by them:
measured, the backward then recomputed every LayerNorm of a ViT). With rebinding, what Dynamo replays
after the graph is a few attribute stores whose values at the end of a forward are empty containers.
"""

from __future__ import annotations

import weakref

import torch

Row = tuple[int, torch.Tensor, torch.Tensor]  # (row index, s_in (P,), s_out (P,) or (H, P) per head)


def version_of(t: torch.Tensor) -> int:
    """In-place modification counter in eager mode (-1 for inference tensors and under compile, where
    a tensor object is one value of the traced graph)."""
    if torch.compiler.is_compiling() or t.is_inference():
        return -1
    return t._version


class ForwardState:
    """The running forward's state. ``e``, ``s_e`` (its per-pair sums), ``e_skipped`` (its batch does
    not fit the pairing) and ``extra_call`` (inside the decomposition's call of a component on ``e``)
    are read and set by the decomposition protocol."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forgets everything: the forward is over."""
        self.new_rows()
        self.pending: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, int]] = {}
        self.pending_heads: dict[int, torch.Tensor] = {}
        self.e: torch.Tensor | None = None
        self.s_e: torch.Tensor | None = None
        self.e_skipped = False
        self.extra_call = False

    def new_rows(self) -> None:
        """Forgets the rows and the reduced tensors (they were flushed), keeps partial components and e."""
        # layer -> ((tensor or a weak reference to it, its per-pair sums, version), ...): tensors shared
        # by two hooks of a layer
        self.slots: dict[int, tuple[tuple[torch.Tensor | weakref.ref, torch.Tensor, int], ...]] = {}
        self.rows: tuple[Row, ...] = ()
        self.head_rows: tuple[Row, ...] = ()
        self.seen: tuple[int, ...] = ()  # row indices added during this forward

    def reduced(self, li: int, t: torch.Tensor) -> torch.Tensor | None:
        """The sums of ``t`` if it was reduced in layer ``li`` during this forward and not changed since."""
        for src, sums, version in self.slots.get(li, ()):
            if (src if isinstance(src, torch.Tensor) else src()) is t and version == version_of(t):
                return sums
        return None

    def keep(self, li: int, reduced: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Records ``(tensor, sums)`` pairs reduced in layer ``li``, for `reduced`. Only the
        layer's own are kept: holding every layer's activations to the end of the forward kept the
        whole forward's activations alive in eager mode (memory, and fresh pages for every layer
        instead of the allocator's reused ones); a tensor shared across layers is reduced again. In
        eager mode a weak reference stands for the tensor, so that no activation outlives its last
        use by the model (a strong reference would hold FC1's output, 4x the width, to the next layer);
        a traced forward keeps the tensor (one value of the graph: nothing is held past it)."""
        compiling = torch.compiler.is_compiling()
        new = tuple((t if compiling else weakref.ref(t), s, version_of(t)) for t, s in reduced)
        self.slots = {li: (*self.slots.get(li, ()), *new)}

    def gather(self, ci: int, li: int, nparts: int, s_in: torch.Tensor, s_out: torch.Tensor
               ) -> torch.Tensor | None:
        """A component made of ``nparts`` modules sharing the input (SwiGLU fc1_g + fc1_x): the summed
        output sums once every part is in, else None. One part: ``s_out`` itself."""
        if nparts == 1:
            return s_out
        p = self.pending.get((ci, li))
        p = (s_in, s_out, 1) if p is None else (p[0], p[1] + s_out, p[2] + 1)
        rest = {k: v for k, v in self.pending.items() if k != (ci, li)}
        self.pending = rest if p[2] == nparts else {**rest, (ci, li): p}
        return p[1] if p[2] == nparts else None

    def set_heads(self, li: int, sums: torch.Tensor) -> None:
        """Per-head sums ``(H, P)`` of layer ``li``'s output projection input, until its MHA row."""
        self.pending_heads = {**self.pending_heads, li: sums}

    def add(self, row: int, s_in: torch.Tensor, s_out: torch.Tensor, head_layer: int | None) -> None:
        """Adds a row; with ``head_layer``, also that layer's per-head row if its sums are pending."""
        self.seen = (*self.seen, row)
        self.rows = (*self.rows, (row, s_in, s_out))
        if head_layer is not None and head_layer in self.pending_heads:
            heads = self.pending_heads[head_layer]
            self.pending_heads = {k: v for k, v in self.pending_heads.items() if k != head_layer}
            self.head_rows = (*self.head_rows, (head_layer, s_in, heads))
