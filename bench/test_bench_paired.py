"""pytest-benchmark suite of the paired ops: ``pytest bench/ --benchmark-only`` (not part of CI's tests/).

Every public paired op (``pair_sq_distances``, ``pair_distances``, ``pair_ratios``,
``pair_sq_distances_grouped``) on every backend available on this machine, at a ViT-Base activation
shape, float32 and bfloat16. ``extra_info`` records bytes read and GB/s so the JSON
(``--benchmark-json``) holds the rates as well as the times. The peer formulas are benchmarked beside
them for the ratio.
"""

from __future__ import annotations

import pytest
import torch

import vitplast_kernels as vk

SHAPE = (64, 197, 768)  # (B, n, d): ViT-Base tokens x channels, 64 pairs
GROUP = 6  # tensors per grouped call: the distinct tensors of one pre-norm block


def _devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _cases() -> list:
    out = []
    for device in _devices():
        for name in vk.backend_names():
            try:
                vk.pair_sq_distances(torch.zeros(1, 2, device=device), torch.ones(1, 2, device=device),
                                     backend=name)
            except (ValueError, RuntimeError, ImportError):
                continue  # not for this device / not built here
            out.append(pytest.param(device, name, id=f"{device}-{name}"))
    return out


DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


def _pair(device, dtype, shape=SHAPE):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(shape, generator=gen).to(dtype).to(device)
    b = torch.randn(shape, generator=gen).to(dtype).to(device)
    return a, b


def _sync(device):
    return (lambda: torch.cuda.synchronize()) if device == "cuda" else (lambda: None)


def _bench(benchmark, fn, device, nbytes):
    sync = _sync(device)

    def call():
        out = fn()
        sync()
        return out

    out = benchmark(call)
    if benchmark.stats is not None:  # None under --benchmark-disable
        median = benchmark.stats.stats.median
        benchmark.extra_info.update(bytes=nbytes, GBps=nbytes / median / 1e9)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device,backend", _cases())
def test_pair_sq_distances(benchmark, device, backend, dtype):
    a, b = _pair(device, dtype)
    out = _bench(benchmark, lambda: vk.pair_sq_distances(a, b, backend=backend), device,
                 2 * a.numel() * a.element_size())
    assert out.shape == (SHAPE[0],)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device,backend", _cases())
def test_pair_distances(benchmark, device, backend, dtype):
    a, b = _pair(device, dtype)
    out = _bench(benchmark, lambda: vk.pair_distances(a, b, backend=backend), device,
                 2 * a.numel() * a.element_size())
    assert out.shape == (SHAPE[0],)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device,backend", _cases())
def test_pair_ratios(benchmark, device, backend, dtype):
    x, y = _pair(device, dtype)
    fx, fy = _pair(device, dtype, (SHAPE[0], SHAPE[1], 4 * SHAPE[2]))  # an FC1 output
    out = _bench(benchmark, lambda: vk.pair_ratios(fx, fy, x, y, backend=backend), device,
                 2 * (x.numel() + fx.numel()) * x.element_size())
    assert out.shape == (SHAPE[0],)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device,backend", _cases())
def test_pair_sq_distances_grouped(benchmark, device, backend, dtype):
    pairs = [_pair(device, dtype) for _ in range(GROUP)]
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    out = _bench(benchmark, lambda: vk.pair_sq_distances_grouped(a, b, backend=backend), device,
                 2 * GROUP * a[0].numel() * a[0].element_size())
    assert out.shape == (GROUP, SHAPE[0])


PEERS = {
    "eager": lambda x, y: ((x - y) ** 2).flatten(1).sum(-1).sqrt(),
    "vector_norm": lambda x, y: torch.linalg.vector_norm(x - y, dim=tuple(range(1, x.dim()))),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("peer", list(PEERS))
@pytest.mark.parametrize("device", _devices())
def test_peer_paired(benchmark, device, peer, dtype):
    a, b = _pair(device, dtype)
    out = _bench(benchmark, lambda: PEERS[peer](a, b), device, 2 * a.numel() * a.element_size())
    assert out.shape == (SHAPE[0],)
