"""Device-side accumulation of a capture: per-forward rows of per-pair sums -> statistics -> running sums.

The rows of one forward pass (``(row index, s_in (P,), s_out (P,))``, one per component and layer that
fired) are turned into statistics together, a few launches per forward, and added in place to a float64
buffer allocated once when the capture is attached. The buffer's address never changes (it is marked
static for ``torch.compile``, so CUDA graphs can replay the update), no value goes to the host, and the
index lists are Python structure fixed when a forward is traced. Counters (forwards, rows, skipped
batches) are a small int64 device tensor for the same reasons.
"""

from __future__ import annotations

import torch

from .pairings import Pairing

FORWARDS, ROWS, SKIPPED = 0, 1, 2  # counter slots


def _static(t: torch.Tensor) -> torch.Tensor:
    mark = getattr(torch._dynamo, "mark_static_address", None)
    if mark is not None:
        mark(t)
    return t


def _new(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    with torch.inference_mode(False), torch.no_grad():  # a normal tensor even inside inference_mode
        return _static(torch.zeros(shape, dtype=dtype, device=device))


def _passes(rows: list[int]) -> list[list[int]]:
    """Positions of ``rows`` grouped so that no row index repeats within a group (an index_add with
    distinct indices writes each address once: deterministic without atomics on any device)."""
    passes: list[list[int]] = []
    for k, r in enumerate(rows):
        for p in passes:
            if all(rows[j] != r for j in p):
                p.append(k)
                break
        else:
            passes.append([k])
    return passes


class Accumulator:
    """Running float64 sums ``(R, F)`` (R = components x layers) and ``(L, H, F)`` (per head), counters."""

    def __init__(self, pairing: Pairing, n_rows: int, n_layers: int, heads: int | None,
                 device: torch.device) -> None:
        self.pairing = pairing
        fields = len(pairing.stat_fields)
        self.acc = _new((n_rows, fields), torch.float64, device)
        self.head_acc = None if heads is None else _new((n_layers, heads, fields), torch.float64, device)
        self.counters = _new((3,), torch.int64, device)
        self.head_rows_added = False  # host flag: set when per-head rows were added (eager bookkeeping)
        self._index_cache: dict[tuple, torch.Tensor] = {}  # eager: index/count constants, once per layout

    def zero_(self) -> None:
        for t in (self.acc, self.head_acc, self.counters):
            if t is not None:
                t.zero_()
        self.head_rows_added = False

    def count(self, slot: int, n: int = 1) -> None:
        self.counters[slot] += n

    def _to(self, device: torch.device) -> None:
        """Follows activations to another device (a model moved after attaching): eager only."""
        self.acc = _static(self.acc.to(device))
        self.counters = _static(self.counters.to(device))
        if self.head_acc is not None:
            self.head_acc = _static(self.head_acc.to(device))

    def _const(self, values: list[int], device: torch.device) -> torch.Tensor:
        """``values`` as an int64 device tensor; in eager mode built once per layout (no host copy per
        forward), under torch.compile a constant of the graph."""
        if torch.compiler.is_compiling():
            return torch.tensor(values, dtype=torch.long, device=device)
        key = (tuple(values), device)
        idx = self._index_cache.get(key)
        if idx is None:
            idx = self._index_cache[key] = torch.tensor(values, dtype=torch.long, device=device)
        return idx

    def _index_add(self, acc: torch.Tensor, rows: list[int], st: torch.Tensor) -> None:
        if rows == list(range(acc.shape[0])):  # every row once, in order (a whole forward): a plain add
            acc.add_(st)
            return
        for p in _passes(rows):
            sel = st if len(p) == len(rows) else st[self._const(p, st.device)]
            acc.index_add_(0, self._const([rows[k] for k in p], st.device), sel)

    def add_rows(self, rows: list[tuple[int, torch.Tensor, torch.Tensor]], forwards: int = 0) -> None:
        """Statistics of ``rows`` (row index, s_in (P,), s_out (P,)) added to the running sums, in one
        pass per pair count (sorted by row: a whole forward is one fused update of the buffer);
        ``forwards`` is added to the forward counter in the same update as the row counter."""
        if not rows:
            return
        if rows[0][1].device != self.acc.device:
            self._to(rows[0][1].device)
        by_row: dict[int, list[tuple[int, torch.Tensor, torch.Tensor]]] = {}
        for row in rows:
            by_row.setdefault(row[0], []).append(row)
        by_p: dict[int, list[tuple[int, torch.Tensor, torch.Tensor]]] = {}
        for k in sorted(by_row):
            for row in by_row[k]:
                by_p.setdefault(row[1].shape[-1], []).append(row)
        for group in by_p.values():
            s_in = torch.stack([a for _, a, _ in group])
            s_out = torch.stack([b for _, _, b in group])
            self._index_add(self.acc, [k for k, _, _ in group], self.pairing.stats(s_in, s_out))
        counts = [0] * self.counters.shape[0]
        counts[FORWARDS], counts[ROWS] = forwards, len(rows)
        self.counters.add_(self._const(counts, self.counters.device))

    def add_head_rows(self, rows: list[tuple[int, torch.Tensor, torch.Tensor]]) -> None:
        """Per-head statistics: rows of (layer, MHA s_in (P,), per-head s_out (H, P))."""
        if not rows or self.head_acc is None:
            return
        by_shape: dict[tuple[int, ...], list[tuple[int, torch.Tensor, torch.Tensor]]] = {}
        for row in rows:
            by_shape.setdefault(tuple(row[2].shape), []).append(row)
        for group in by_shape.values():
            s_in = torch.stack([a for _, a, _ in group]).unsqueeze(1)  # (K, 1, P) against (K, H, P)
            s_out = torch.stack([b for _, _, b in group])
            st = self.pairing.stats(s_in, s_out)
            if st.shape[1] != self.head_acc.shape[1]:
                raise ValueError(f"per_head=True: layers have different head counts ({st.shape[1]} vs "
                                 f"{self.head_acc.shape[1]}); per-head rates need one head count")
            self._index_add(self.head_acc, [k for k, _, _ in group], st)
        self.head_rows_added = True
