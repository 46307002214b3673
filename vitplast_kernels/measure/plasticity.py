"""``pairwise_plasticity(acts)``: the measurement's result, from a capture or from plain tensors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ..ops import validate
from .capture import Capture
from .pairings import get_pairing
from .result import PlasticityResult

InOut = tuple[torch.Tensor, torch.Tensor]


def _from_tensors(acts: Mapping[str, InOut | Sequence[InOut]], pairs: str, backend: str) -> PlasticityResult:
    pairing = get_pairing(pairs)
    names = list(acts)
    per_name: list[list[InOut]] = []
    for name in names:
        v = acts[name]
        if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(t, torch.Tensor) for t in v):
            layers = [tuple(v)]
        elif isinstance(v, (tuple, list)) and v and all(
            isinstance(p, (tuple, list)) and len(p) == 2 for p in v
        ):
            layers = [tuple(p) for p in v]
        else:
            raise TypeError(
                f"acts[{name!r}] must be (input, output) tensors or a sequence of them (one per layer), "
                f"got {type(v).__name__}"
            )
        per_name.append(layers)  # type: ignore[arg-type]
    if not names:
        raise ValueError("acts is empty: nothing to measure")
    n_layers = max(len(x) for x in per_name)
    rows = []
    for name, layers in zip(names, per_name, strict=True):
        row = []
        for l, (x, y) in enumerate(layers):
            where = f"acts[{name!r}]" + (f"[{l}]" if len(layers) > 1 else "")
            for what, t in (("input", x), ("output", y)):
                if not isinstance(t, torch.Tensor) or t.dim() < 2:
                    raise ValueError(f"{where} {what} must be a (N, ...) tensor, got "
                                     f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
                validate.check_tensor(f"{where} {what}", t)  # dtype named here, not as the op's a[g]
                pairing.check(t.shape[0], f"{where} {what}")
            if x.shape[0] != y.shape[0]:
                raise ValueError(f"{where}: input has {x.shape[0]} sequences but output has {y.shape[0]}")
            s = pairing.sq_sums([x.detach(), y.detach()], backend=backend)
            row.append(pairing.stats(s[0], s[1]))
        device = row[0].device
        pad = torch.zeros(len(pairing.stat_fields), dtype=torch.float64, device=device)
        row += [pad] * (n_layers - len(row))
        rows.append(torch.stack([r.to(device) for r in row]))
    device = rows[0].device
    stats = torch.stack([r.to(device) for r in rows])
    return PlasticityResult(stats, names, [str(l) for l in range(n_layers)],
                            meta={"protocol": "tensors", "pairs": pairing.name, "tokens": "all"})


def pairwise_plasticity(
    acts: Capture | Mapping[str, InOut | Sequence[InOut]],
    *,
    strict: bool = False,
    distributed: bool = False,
    group=None,
    pairs: str | None = None,
    backend: str | None = None,
) -> PlasticityResult:
    """Per component and layer statistics of the pair rates ``||f(x) - f(y)||_F / ||x - y||_F``.

    Args:
        acts: a `capture` (after its forward passes), or a mapping
            ``{name: (input, output)}`` of ``(N, ...)`` tensors (``N`` sequences first; one layer), or
            ``{name: [(input, output), ...]}`` (one pair per layer), paired by ``pairs``
            (``"halves"``: sequence ``i`` with ``i + N/2``).
        strict: raise ValueError naming the component and layer if any pair had a non-finite value
            (this synchronises with the device).
        distributed: sum the statistics over the ranks of ``group`` (``torch.distributed``).
        group: the ``torch.distributed`` process group for ``distributed=True`` (default: the world).
        pairs: the pairing of a plain mapping (``"halves"``, the default, or ``"all"``); a capture
            uses the one given to `capture` (passing ``pairs`` with a capture raises).
        backend: the paired op's backend for a plain mapping (default ``"auto"``); a capture uses the
            one given to `capture` (passing ``backend`` with a capture raises).
    Returns:
        a `PlasticityResult`; its sums stay on the device until a value is asked for.
    """
    if isinstance(acts, Capture):
        if pairs is not None or backend is not None:
            raise ValueError(
                "pairs and backend are chosen when the capture is made: capture(model, pairs=..., "
                "backend=...); pairwise_plasticity(acts) only reads it"
            )
        res = acts.result()
    elif isinstance(acts, Mapping):
        res = _from_tensors(acts, pairs or "halves", backend or "auto")
    else:
        raise TypeError(
            f"acts must be a capture(...) or a mapping {{name: (input, output)}}, got {type(acts).__name__}"
        )
    if distributed:
        res = res.all_reduce(group)
    if strict:
        bad = res.nonfinite_report()
        if bad:
            where = "; ".join(f"{c} layer {l}: {n} pair(s)" for c, l, n in bad)
            raise ValueError(f"non-finite activations or rates (strict=True): {where}")
    return res
