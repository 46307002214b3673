"""The one distributed context of the commands: torchrun / DistributedDataParallel plumbing (gloo on
CPU, nccl on GPU) for finetune and claim, and `world_size` for the trainer callbacks.

Outside torchrun (no ``WORLD_SIZE`` > 1 in the environment) every helper is a no-op on one process.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import environment
from .device import resolve_device


@dataclass
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """In-place sum over ranks (float64 / int64 tensors travel as they are)."""
        if self.enabled:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def broadcast_object(self, obj):
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        if self.initialized_here and dist.is_initialized():
            dist.destroy_process_group()


def silent(*args, **kwargs) -> None:
    """Prints nothing: the ``say`` of ranks other than 0 (and of runs meant to be quiet)."""


def world_size() -> int:
    """Ranks of the default process group (1 outside ``torch.distributed``)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def init_distributed(device: str) -> DistContext:
    """Join the process group torchrun describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``); ``device``
    is a ``--device`` value (``auto`` included) and picks the backend. A group that exists already is
    joined, and left to whoever created it (`DistContext.close` closes only its own)."""
    world, rank, local_rank = environment.world()  # ValueError naming a variable that is not a number
    if world <= 1:
        return DistContext()
    if dist.is_initialized():
        return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, False)
    backend = "nccl" if resolve_device(device).type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend)
    return DistContext(rank, world, local_rank, True)
