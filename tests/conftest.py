"""Shared fixtures: Triton runs interpreted on CPU-only machines (must be set before kernels are
defined), outputs of every op start poisoned (NaN) so unwritten results show, fresh seeds per test."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _poison_uninitialized_memory():
    """torch.empty / at::empty results are filled with NaN while deterministic mode is on."""
    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(prev_det, warn_only=prev_warn)
    torch.utils.deterministic.fill_uninitialized_memory = prev_fill


@pytest.fixture
def gen(request) -> torch.Generator:
    """A generator seeded from the test's name and a per-session salt: fresh data, reproducible by
    setting VITPLAST_TEST_SEED."""
    salt = int(os.environ.get("VITPLAST_TEST_SEED", str(int.from_bytes(os.urandom(4), "little"))))
    g = torch.Generator().manual_seed((hash(request.node.nodeid) ^ salt) & 0x7FFFFFFF)
    return g


def pytest_report_header(config):
    return f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"
