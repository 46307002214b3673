"""Monitoring under DistributedDataParallel + torch.compile and under FSDP2 (fully_shard), two CPU
processes on gloo: the combined result holds every rank's pairs and equals the eager measurement."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import free_port

import vitplast_kernels as vk

pytestmark = pytest.mark.slow  # see the Makefile's test-fast

timm = pytest.importorskip("timm")


def _model():
    torch.manual_seed(0)  # the same weights on every rank
    return timm.create_model("vit_tiny_patch16_224", img_size=16, patch_size=8, embed_dim=32, num_heads=2,
                             depth=2, num_classes=10)


def _batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(50 + rank)
    return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)


def _train_steps(net, mon, rank: int, steps: int = 3) -> None:
    x, y = _batch(rank)
    for _ in range(steps):
        torch.nn.functional.cross_entropy(net(x), y).backward()
        mon.step()


def _worker(rank: int, world: int, port: int, kind: str, out_dir: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = _model()
        mon = vk.monitor(model, every=2)  # before wrapping and compiling
        if kind == "ddp-compile":
            from torch.nn.parallel import DistributedDataParallel

            net = torch.compile(DistributedDataParallel(model), backend="aot_eager")
        else:
            from torch.distributed.fsdp import fully_shard

            for block in model.blocks:
                fully_shard(block)
            net = fully_shard(model)
        _train_steps(net, mon, rank)
        res = mon.result().all_reduce()
        torch.save({"stats": res.stats.cpu(), "world": res.meta["world_size"]},
                   os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()  # no rank tears gloo down while the other still has collectives in flight
    finally:
        dist.destroy_process_group()
    # Success: leave without the interpreter's teardown, where gloo worker threads that still touch
    # Python objects can abort the process ("terminate called without an active exception") after its
    # result is written (the exit race of pytorch/pytorch#179291)
    os._exit(0)



@pytest.mark.parametrize("kind", ["ddp-compile", "fsdp2"])
def test_two_ranks_monitor_and_combine(tmp_path, kind):
    mp.start_processes(_worker, args=(2, free_port(), kind, str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert got[0]["world"] == 2 and torch.equal(got[0]["stats"], got[1]["stats"])
    # eager, one process: each rank's batch measured at steps 0 and 2 (the weights do not change:
    # no optimiser step), summed
    want = None
    for rank in range(2):
        model = _model()
        mon = vk.monitor(model, every=2)
        _train_steps(model, mon, rank)
        stats = mon.result().stats
        want = stats if want is None else want + stats
    stats = got[0]["stats"]
    assert torch.equal(stats[..., 0], want[..., 0])  # pairs used: 2 steps x 2 pairs x 2 ranks per layer
    assert (stats[..., 0] == 8).all()
    assert torch.allclose(stats, want, rtol=1e-5, atol=0)
