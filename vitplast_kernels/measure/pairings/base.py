"""The base of the pairing schemes: which sequences of a batch are compared, as small strategy objects.

A scheme turns captured tensors ``(N, ...)`` (``N`` sequences first) into per-pair sums of squared
differences ``S[p] = sum_k (T[i_p, k] - T[j_p, k])^2``, float64 (the kernels' sums: right where a
float32 square would overflow or vanish, e.g. activations scaled by 1e30 or 1e-30), and turns a
component's input and output sums ``(S_in, S_out)`` into the five statistics a
`PlasticityResult` accumulates. Capture knows nothing of pairs
beyond this interface.

Schemes:

- ``"halves"`` (`Halves`): a batch of ``N = 2B``
  sequences, sequence ``i`` paired with ``i + B``.
  **Matched pairs** (the paper: ``X`` from the pretraining data, ``Y`` from the downstream data, ``X[i]``
  paired with ``Y[i]``) are the halves of ``torch.cat([X, Y])``.
- ``"all"``: every distinct pair ``i < j`` of one batch:
  `AllPairs` (it carries a sixth statistic, the
  U-statistic's variance).

Each scheme's module registers it (`register_pairing`); importing
`vitplast_kernels.measure.pairings` registers both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .fields import STAT_FIELDS


class Pairing:
    """Interface of a pairing scheme (subclass it; register with `register_pairing`)."""

    name: str = "?"
    stat_fields: tuple[str, ...] = STAT_FIELDS  # what stats() returns along its last dim

    def problem(self, n: int, where: str) -> str | None:
        """Why a batch of ``n`` sequences cannot be paired (``where`` names the tensor); None when it can."""
        raise NotImplementedError

    def check(self, n: int, where: str) -> None:
        """Raises ValueError (`problem`'s text) when a batch of ``n`` sequences cannot be paired."""
        msg = self.problem(n, where)
        if msg is not None:
            raise ValueError(msg)

    def fits(self, n: int) -> bool:
        """Whether a batch of ``n`` sequences can be paired (what `check` checks, without raising)."""
        raise NotImplementedError

    def n_pairs(self, n: int) -> int:
        """Number of pairs a batch of ``n`` sequences holds."""
        raise NotImplementedError

    def sq_sums(self, tensors: Sequence[torch.Tensor], *, backend: str = "auto") -> torch.Tensor:
        """``G`` tensors ``(N, ...)`` (same ``N``, same device; widths and dtypes may differ) -> ``(G, P)``
        float64 per-pair sums of squared differences, in pair order."""
        raise NotImplementedError

    def stats(self, s_in: torch.Tensor, s_out: torch.Tensor) -> torch.Tensor:
        """``(..., P)`` input and output sums -> ``(..., 5)`` float64 statistics (see `pair_stats`)."""
        return pair_stats(s_in, s_out)


def used_rates(
    s_in: torch.Tensor, s_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 per-pair sums of squares (same shape; >= 0, NaN or +inf) -> ``(r, used, identical,
    nonfinite)``: the rates ``sqrt(s_out / s_in)`` of the used pairs (0 elsewhere) and the three masks,
    by the rules of `pair_stats` (shared by every pairing scheme)."""
    identical = s_in == 0
    rate = (s_out / s_in).sqrt()
    # sums of squares and their rates are >= 0, NaN or +inf, so `x < inf` is isfinite for them (NaN
    # compares False) at one op instead of three; a finite rate with a finite s_in implies a finite s_out
    used = ~identical & (rate < math.inf) & (s_in < math.inf)
    nonfinite = ~identical & ~used
    r = torch.where(used, rate, 0.0)
    return r, used, identical, nonfinite


def pair_stats(s_in: torch.Tensor, s_out: torch.Tensor) -> torch.Tensor:
    """Per-pair sums -> ``(..., 5)`` float64 ``[count, sum, sumsq, identical, nonfinite]`` over the last dim.

    ``rate[p] = sqrt(s_out[p] / s_in[p])`` (in float64). A pair is *identical* when ``s_in[p] == 0``
    (excluded: the definition is over distinct pairs), *non-finite* when it is not identical and
    ``s_in``, ``s_out`` or the rate is not finite; every other pair is *used*: ``count`` pairs, ``sum``
    and ``sumsq`` of their rates. No host-device synchronisation.
    """
    s_in = s_in.detach().to(torch.float64)
    s_out = s_out.detach().to(torch.float64)
    if s_out.shape != s_in.shape:
        s_in = s_in.expand_as(s_out)
    return stats_of(*used_rates(s_in, s_out))


def stats_of(r: torch.Tensor, used: torch.Tensor, identical: torch.Tensor, nonfinite: torch.Tensor
             ) -> torch.Tensor:
    """The outputs of `used_rates` -> ``(..., 5)`` float64 ``[count, sum, sumsq, identical,
    nonfinite]`` over the last dim."""
    return torch.stack(
        [used.sum(-1, dtype=torch.float64), r.sum(-1), (r * r).sum(-1),
         identical.sum(-1, dtype=torch.float64), nonfinite.sum(-1, dtype=torch.float64)],
        dim=-1,
    )


_PAIRINGS: dict[str, type[Pairing]] = {}  # filled by the scheme modules (halves, all_pairs)


def register_pairing(name: str, cls: type[Pairing]) -> None:
    """Installs (or replaces) the scheme called ``name`` (`.halves` and `.all_pairs` use it)."""
    _PAIRINGS[name] = cls


def get_pairing(pairs: str | Pairing) -> Pairing:
    """The scheme called ``pairs`` (``"halves"``, ``"all"``, or any registered name), or ``pairs``
    itself when it already is a `Pairing`."""
    if isinstance(pairs, Pairing):
        return pairs
    cls = _PAIRINGS.get(pairs)
    if cls is None:
        raise ValueError(f"pairs must be one of {tuple(_PAIRINGS)}, got {pairs!r}")
    return cls()
