"""What `vitplast.finetune.finetune` returns: one typed `FinetuneResult`, whose `FinetuneResult.to_json`
is what ``grid_summary.json`` holds beside the grid's options."""

from __future__ import annotations

import dataclasses

from ..runs.summary import RunSummary


@dataclasses.dataclass(frozen=True)
class FinetuneResult:
    """The runs of a finetuning grid in run order (each run's `vitplast.runs.summary.RunSummary`) and
    the grid's table: a row per (train, lr) over the seeds (`vitplast.finetune.report.aggregate`) and
    as text. A ``--shard`` (``shard``: its ``I/N``) holds its own runs and no table."""

    runs: list[RunSummary]
    table: list[dict] = dataclasses.field(default_factory=list)
    table_text: str = ""
    shard: str | None = None

    def to_json(self) -> dict:
        """The runs as their summary.json hold them, then the table and its text (a shard: its runs and
        ``shard``)."""
        runs = [s.to_json() for s in self.runs]
        if self.shard is not None:
            return {"runs": runs, "shard": self.shard}
        return {"runs": runs, "table": self.table, "table_text": self.table_text}

    def to_dataframe(self):
        """The table as a pandas ``DataFrame``, a row per (train, lr)."""
        import pandas as pd  # optional dependency, loaded when a frame is asked for

        return pd.DataFrame(self.table)
