"""One progress bar over a whole grid: runs done (those finished before included) out of all of them,
with the runs running, failed, retried and waiting for another process, and the nodes in use; a failed
run, a retry and a wait are also said in a line of their own."""

from __future__ import annotations

from collections.abc import Iterable

from ...outputs.reporter import Reporter


class GridProgress:
    def __init__(self, reporter: Reporter, *, total: int, done: int = 0, wanted: bool | None = None,
                 desc: str = "runs") -> None:
        self.reporter = reporter
        self.bar = reporter.bar(total=total, initial=done, desc=desc, unit="run", wanted=wanted, leave=True)
        self.running, self.nodes, self.failures, self.retries = 0, 0, 0, 0
        self.holders: dict[str, str] = {}  # label of a run waiting for another process -> who holds it

    def _refresh(self, line: str | None = None) -> None:
        """Says ``line`` in a line of its own (above a bar shown), and the counts beside the bar."""
        if line is not None:
            (self.reporter.say if self.bar.disable else self.bar.write)(line)
        waiting = f", waiting {len(self.holders)}" if self.holders else ""
        self.bar.set_postfix_str(f"running {self.running}, failed {self.failures}, retried {self.retries}"
                                 f"{waiting}, nodes {self.nodes}", refresh=True)

    def update(self, running: int, nodes: Iterable[str]) -> None:
        """What the executor sees now: runs training, and the nodes (or hosts) they train on."""
        self.running, self.nodes = running, len(set(nodes))
        self._refresh()

    def finished(self, job) -> None:
        self.holders.pop(job.label, None)
        self.bar.update(1)
        self._refresh()

    def failed(self, failure) -> None:
        self.failures += 1
        self.bar.update(1)
        self._refresh(f"failed: {failure.line()}")

    def retried(self, job, why: str, attempt: int) -> None:
        self.retries += 1
        self._refresh(f"retrying {job.label} (attempt {attempt + 1}; it resumes from its checkpoint): {why}")

    def waiting(self, job, holder: str) -> None:
        self.holders[job.label] = holder
        self._refresh(f"{job.label}: {job.directory} is held by {holder}; training the others, then waiting "
                      "for it")

    def close(self) -> None:
        self.bar.close()
