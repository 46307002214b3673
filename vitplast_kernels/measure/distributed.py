"""Combining results across ranks: the sums (count, sum and sum of squares of the rates, identical and
non-finite pair counts) are all-reduced, so the combined mean is over all pairs of all ranks, not a
mean of per-rank means. `PlasticityResult.all_reduce` is the public entry point."""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_reduce_sums(
    stats: torch.Tensor, heads: torch.Tensor | None, layout: str, group=None
) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """``stats`` (and ``heads``) summed over the ranks of ``group``, and the world size.

    Every rank must call it with sums of the same shapes (``layout`` describes them for the error).
    Uses the device of the sums (CUDA tensors for NCCL, CPU for gloo)."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("distributed=True / all_reduce() needs torch.distributed.init_process_group(...)")
    flat = stats.reshape(-1)
    if heads is not None:
        flat = torch.cat([flat, heads.to(stats.device).reshape(-1)])
    # layout check: every rank must hold the same number of sums
    n = torch.tensor([flat.numel(), -flat.numel()], dtype=torch.float64, device=flat.device)
    dist.all_reduce(n, op=dist.ReduceOp.MAX, group=group)
    if n[0].item() != flat.numel() or -n[1].item() != flat.numel():
        raise ValueError(f"ranks hold results of different layouts (this rank: {layout})")
    flat = flat.clone()
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    new_stats = flat[: stats.numel()].reshape(stats.shape)
    new_heads = None if heads is None else flat[stats.numel():].reshape(heads.shape)
    return new_stats, new_heads, dist.get_world_size(group)
