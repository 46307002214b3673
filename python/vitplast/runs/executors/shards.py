"""``--shard I/N``: one slice of a grid's deterministic run list, for schedulers without Ray (SLURM
arrays, Kubernetes indexed jobs). Run ``k`` of the list (0-based) belongs to shard ``k % N + 1``: the
slices interleave, so each holds a like share of every kind of run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TypeVar

Item = TypeVar("Item")


@dataclasses.dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"I/N"`` with 1 <= I <= N; ValueError with the reason."""
        head, sep, tail = text.strip().partition("/")
        try:
            index, count = int(head), int(tail)
        except ValueError:
            raise ValueError(f"expected I/N (e.g. 1/4), got {text!r}") from None
        if not sep or count < 1 or not 1 <= index <= count:
            raise ValueError(f"expected I/N with 1 <= I <= N (e.g. 1/4), got {text!r}")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def select(self, items: Sequence[Item]) -> list[Item]:
        """The items of this shard, in list order."""
        return [x for k, x in enumerate(items) if k % self.count == self.index - 1]


def shard_from_env(env: Mapping[str, str]) -> Shard | None:
    """The shard of a SLURM array task (``SLURM_ARRAY_TASK_ID`` counted from ``SLURM_ARRAY_TASK_MIN`` in
    steps of ``SLURM_ARRAY_TASK_STEP``, one of ``SLURM_ARRAY_TASK_COUNT``), None outside an array;
    ValueError when the variables disagree."""
    task, count = env.get("SLURM_ARRAY_TASK_ID"), env.get("SLURM_ARRAY_TASK_COUNT")
    if not task or not count:
        return None
    try:
        offset = int(task) - int(env.get("SLURM_ARRAY_TASK_MIN", "0") or 0)
        step, n = int(env.get("SLURM_ARRAY_TASK_STEP", "1") or 1), int(count)
    except ValueError:
        raise ValueError(f"--shard: SLURM_ARRAY_TASK_ID={task!r} / SLURM_ARRAY_TASK_COUNT={count!r} are not "
                         "integers; pass --shard I/N") from None
    if step < 1 or offset % step or not 0 <= offset // step < n:
        raise ValueError(f"--shard: SLURM_ARRAY_TASK_ID={task} is not one of the {n} tasks of a regular "
                         "array (SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_STEP); pass --shard I/N")
    return Shard(offset // step + 1, n)
