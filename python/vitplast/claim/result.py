"""What `vitplast.claim.claim` returns: one typed `ClaimResult`, whose `ClaimResult.to_json` is what
``claim.json`` holds (one arm) or ``aggregate.json`` (several arms, each arm's own result under
``datasets``), and whose `ClaimResult.read` reads a claim.json back, checked field by field.

Which parts it holds says what ran: an analysed arm has ``measurement``, ``analysis`` and ``runs``;
several arms ``datasets`` and ``aggregate``; a ``--dry-run`` only ``config``, ``plan`` and
``estimate``; a ``--shard`` its ``runs``. ``config`` (the options), ``plan`` (the plan in numbers),
``estimate`` and ``measurement`` stay the JSON records they are in the file; the analysis and the
aggregate are typed (`vitplast.claim.records`).
"""

from __future__ import annotations

import dataclasses

from ..outputs.result_files import read_result_json
from .aggregate import Aggregate
from .records import CLAIM_FORMAT, ClaimAnalysis, Record, Setup, encode

# what a table of the ranked units holds: ClaimResult.to_dataframe's columns after ``arm``
UNIT_COLUMNS = ("unit", "component", "layer", "plasticity", "best_lr_gain", "accuracy", "lr",
                "trainable_params", "relative_gain")


class ClaimResult(Record):
    """A claim's result (see the module): the parts that did not run are None; ``text`` is the report
    (claim.txt, or aggregate.txt over several arms), which the JSON file does not hold."""

    config: dict
    plan: dict
    estimate: dict | None = None
    measurement: dict | None = None
    analysis: ClaimAnalysis | None = None
    runs: list | None = None
    datasets: dict[str, ClaimResult] | None = None
    aggregate: Aggregate | None = None
    text: str | None = None

    def to_json(self) -> dict:
        """The file's content: every part that ran (``estimate`` always: null when none was made),
        non-finite numbers null; not the report, nor over several arms each arm's result (its own
        claim.json)."""
        return {f.name: encode(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.name not in ("text", "datasets")
                and (f.name == "estimate" or getattr(self, f.name) is not None)}

    @property
    def setup(self) -> Setup:
        """How an arm was run, as its report says it (`vitplast.claim.records.Setup`)."""
        return Setup.of({"config": self.config, "plan": self.plan})

    def arms(self) -> dict[str, ClaimResult]:
        """Each analysed arm by name (one arm: ``{"": self}``)."""
        return self.datasets if self.datasets is not None else {"": self}

    def to_dataframe(self):
        """The ranked units of every arm as a pandas ``DataFrame``: ``arm`` (the arm's name; "" for one
        arm), then `UNIT_COLUMNS` (``best_lr_gain`` and ``accuracy``: their means over seeds)."""
        import pandas as pd  # optional dependency, loaded when a frame is asked for

        rows = [(name, r.unit, r.component, r.layer, r.plasticity, r.best_lr_gain.mean, r.accuracy.mean, r.lr,
                 r.trainable_params, r.relative_gain)
                for name, arm in self.arms().items() if arm.analysis is not None for r in arm.analysis.rows]
        return pd.DataFrame(rows, columns=["arm", *UNIT_COLUMNS])

    @classmethod
    def read(cls, path) -> ClaimResult:
        """The claim.json at ``path`` (one arm's), its format, checksum and fields checked."""
        doc, _ = read_result_json(path, kind=CLAIM_FORMAT[0], versions=(CLAIM_FORMAT[1],))
        return cls.from_json(doc, str(path), "claim")
