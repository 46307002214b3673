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
        self.running, self.nodes = 0, 0
        self.trained, self.failures, self.retries = 0, 0, 0
        self.holders: dict[str, str] = {}  # label of a run waiting for another process -> who holds it

    def _refresh(self) -> None:
        parts = [f"running {self.running}", f"failed {self.failures}", f"retried {self.retries}"]
        if self.holders:
            parts.append(f"waiting {len(self.holders)}")
        parts.append(f"nodes {self.nodes}")
        self.bar.set_postfix_str(", ".join(parts), refresh=True)

    def _say(self, text: str) -> None:
        if self.bar.disable:
            self.reporter.say(text)
        else:
            self.bar.write(text)

    def update(self, running: int, nodes: Iterable[str]) -> None:
        """What the executor sees now: runs training, and the nodes (or hosts) they train on."""
        self.running, self.nodes = running, len(set(nodes))
        self._refresh()

    def finished(self, job) -> None:
        self.trained += 1
        self.holders.pop(job.label, None)
        self.bar.update(1)
        self._refresh()

    def failed(self, failure) -> None:
        self.failures += 1
        self.bar.update(1)
        self._say(f"failed: {failure.line()}")
        self._refresh()

    def retried(self, job, why: str, attempt: int) -> None:
        self.retries += 1
        self._say(f"retrying {job.label} (attempt {attempt + 1}; it resumes from its checkpoint): {why}")
        self._refresh()

    def waiting(self, job, holder: str) -> None:
        self.holders[job.label] = holder
        self._say(f"{job.label}: {job.directory} is held by {holder}; training the others, then waiting "
                  "for it")
        self._refresh()

    def close(self) -> None:
        self.bar.close()
