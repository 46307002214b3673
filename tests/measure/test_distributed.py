"""Two CPU processes (gloo): combined results are sums over all pairs of all ranks, not means of means."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import free_port

import vitplast_kernels as vk


def _data(rank: int):
    g = torch.Generator().manual_seed(100 + rank)
    n = 2 if rank == 0 else 6  # unequal pair counts: a mean of means would be wrong
    x = torch.randn(2 * n, 5, 8, generator=g)
    y = torch.randn(2 * n, 5, 8, generator=g) * (1 + 3 * rank)
    return x, y


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same model on every rank
        net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
        x, y = _data(rank)
        res = vk.pairwise_plasticity({"f": (x, y)}, distributed=True)
        with vk.capture(net, components={"FC1": "0", "FC2": "2"}) as acts, torch.no_grad():
            net(x)
        res2 = vk.pairwise_plasticity(acts).all_reduce()
        torch.save({"stats": res.stats, "cap": res2.stats, "world": res.meta["world_size"]},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()



@pytest.mark.slow
def test_all_reduce_two_ranks_gloo(tmp_path):
    mp.spawn(_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    (x0, y0), (x1, y1) = _data(0), _data(1)
    # the same pairs measured in one process: cat the halves so pair i stays (x[i], x[i + n])
    n0, n1 = x0.shape[0] // 2, x1.shape[0] // 2
    x = torch.cat([x0[:n0], x1[:n1], x0[n0:], x1[n1:]])
    y = torch.cat([y0[:n0], y1[:n1], y0[n0:], y1[n1:]])
    single = vk.pairwise_plasticity({"f": (x, y)})
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    with vk.capture(net, components={"FC1": "0", "FC2": "2"}) as acts, torch.no_grad():
        net(x)
    single_cap = vk.pairwise_plasticity(acts)
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["world"] == 2
        assert torch.allclose(got["stats"], single.stats, rtol=1e-6)
        assert torch.allclose(got["cap"], single_cap.stats, rtol=1e-6)
    combined = vk.PlasticityResult(got["stats"], ["f"], ["0"])
    assert combined.n_pairs("f").item() == 8
    assert torch.allclose(combined.mean("f"), single.mean("f"), rtol=1e-6)
