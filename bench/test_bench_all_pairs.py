"""pytest-benchmark suite of the all-pairs ops: ``pytest bench/ --benchmark-only`` (not part of CI).

``all_pair_sq_distances``, ``all_pair_distances``, ``all_pair_ratios`` on every backend usable here, for
one batch of ``N`` sequences of ViT-Small tokens, float32 and bfloat16, with ``torch.cdist`` and the
``mm`` formula as peers. ``extra_info``: bytes read (the batch once) and distinct pairs per second.
"""

from __future__ import annotations

import pytest
import torch

import vitplast_kernels as vk

N, SHAPE = 64, (197, 384)  # (N sequences, tokens x channels)


def _devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _cases() -> list:
    out = []
    for device in _devices():
        for backend in ("auto", "cpu", "triton", "torch"):
            try:
                vk.all_pair_sq_distances(torch.randn(3, 4, device=device), backend=backend)
            except (ValueError, RuntimeError, ImportError):
                continue
            out.append(pytest.param(device, backend, id=f"{device}-{backend}"))
    return out


DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


def _batch(device, dtype, width=1):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(N, SHAPE[0], SHAPE[1] * width, generator=gen).to(dtype).to(device)


def _bench(benchmark, fn, device, nbytes):
    def call():
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    out = benchmark(call)
    if benchmark.stats is not None:
        median = benchmark.stats.stats.median
        benchmark.extra_info.update(bytes=nbytes, pairs_per_s=N * (N - 1) / 2 / median)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device,backend", _cases())
def test_all_pair_sq_distances(benchmark, device, backend, dtype):
    a = _batch(device, dtype)
    out = _bench(benchmark, lambda: vk.all_pair_sq_distances(a, backend=backend), device,
                 a.numel() * a.element_size())
    assert out.shape == (N, N)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device,backend", _cases())
def test_all_pair_distances(benchmark, device, backend, dtype):
    a = _batch(device, dtype)
    out = _bench(benchmark, lambda: vk.all_pair_distances(a, backend=backend), device,
                 a.numel() * a.element_size())
    assert out.shape == (N, N)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device,backend", _cases())
def test_all_pair_ratios(benchmark, device, backend, dtype):
    x, fx = _batch(device, dtype), _batch(device, dtype, width=4)  # an FC1 output
    out = _bench(benchmark, lambda: vk.all_pair_ratios(fx, x, backend=backend), device,
                 (x.numel() + fx.numel()) * x.element_size())
    assert out.shape == (N, N)


PEERS = {
    "cdist": lambda a: torch.cdist(a.flatten(1).float(), a.flatten(1).float()),
    "mm": lambda a: (lambda f: (f.square().sum(1)[:, None] + f.square().sum(1)[None] - 2 * f @ f.T)
                     .clamp_min(0).sqrt())(a.flatten(1).float()),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("peer", list(PEERS))
@pytest.mark.parametrize("device", _devices())
def test_peer_all_pairs(benchmark, device, peer, dtype):
    a = _batch(device, dtype)
    out = _bench(benchmark, lambda: PEERS[peer](a), device, a.numel() * a.element_size())
    assert out.shape == (N, N)
