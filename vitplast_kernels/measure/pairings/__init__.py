"""Pairing schemes: which sequences of a batch are compared, and the statistics kept per pair set.

- `.base`: the `Pairing` interface, the per-pair statistics every scheme shares
  (`pair_stats`) and the registry (`register_pairing`, `get_pairing`);
- `.halves`: ``"halves"`` (a batch of ``2B``, ``i`` with ``i + B``; matched pairs as
  ``torch.cat([X, Y])``);
- `.all_pairs`: ``"all"`` (every pair ``i < j``: the U-statistic, with its jackknife variance);
- `.fields`: the names of the accumulated statistics.

Importing this package registers ``"halves"`` and ``"all"``.
"""

from .all_pairs import AllPairs, triu_pairs, u_stats
from .base import Pairing, get_pairing, pair_stats, register_pairing, stats_of, used_rates
from .fields import STAT_FIELDS, U_STAT_FIELDS
from .halves import Halves

__all__ = ["STAT_FIELDS", "U_STAT_FIELDS", "AllPairs", "Halves", "Pairing", "get_pairing", "pair_stats",
           "register_pairing", "stats_of", "triu_pairs", "u_stats", "used_rates"]
