"""Shared fixtures: Triton runs interpreted on CPU-only machines (must be set before kernels are
defined), outputs of every op start poisoned (NaN) so unwritten results show, and seeds that replay.

OpenMP threads that wait sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE`` unless the environment
sets it; read once, when torch loads OpenMP, so it is set before ``import torch``, and inherited by the
processes the tests start). The tests run in two workers on two cores, each worker with two OpenMP
threads: a spinning thread that waits for a descheduled partner burns a whole time slice per parallel
region, which made small tests (a docs page's capture of a tiny model) 20-400x slower than alone.
Threads, their number and the results are unchanged.

Seeds: every test starts with the torch and ``random`` generators seeded from its id (the crc32 of
``base:nodeid``, the same in every process and on every machine), and the ``gen`` fixture is a
``torch.Generator`` seeded the same way. ``base`` is 0 unless ``--seed N`` or ``VITPLAST_TEST_SEED=N``
sets it (other data, still replayable). A failing test prints its seeds and the base to replay it with.
"""

from __future__ import annotations

import os
import random
import zlib

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # after the OpenMP setting above

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

SEED_ENV = "VITPLAST_TEST_SEED"
_SEEDS = pytest.StashKey[dict]()
_FAILED = pytest.StashKey[list]()  # "nodeid: replay line" of each failed test
_PLAIN_ID = pytest.StashKey[str]()  # a test's node id before its xdist group was appended


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=None, metavar="N",
                     help=f"base of every test's seeds (default: ${SEED_ENV}, else 0)")


def base_seed(config) -> int:
    value = config.getoption("--seed", default=None)
    if value is not None:
        return value
    text = os.environ.get(SEED_ENV, "").strip()
    try:
        return int(text, 0) if text else 0
    except ValueError:
        raise pytest.UsageError(f"{SEED_ENV} must be an integer, got {text!r}") from None


def derived_seed(base: int, nodeid: str, stream: str) -> int:
    """A 31-bit seed from the base, the test id and the stream's name (crc32: unlike ``hash``, which
    Python salts per process, the same in every run)."""
    return zlib.crc32(f"{base}:{stream}:{nodeid}".encode()) & 0x7FFFFFFF


def _seeds(item) -> dict:
    if _SEEDS not in item.stash:
        base = base_seed(item.config)
        nodeid = item.stash.get(_PLAIN_ID, item.nodeid)  # without pytest-xdist's "@group"
        item.stash[_SEEDS] = {"base": base, "global": derived_seed(base, nodeid, "global"),
                              "gen": derived_seed(base, nodeid, "gen")}
    return item.stash[_SEEDS]


def replay_line(item) -> str:
    s = _seeds(item)
    return (f"seed={s['global']} (torch, random; gen {s['gen']}) from the test id and base {s['base']}: "
            f"{SEED_ENV}={s['base']} to replay")


@pytest.fixture(autouse=True)
def _seed_from_test_id(request):
    """The torch (CPU and CUDA) and ``random`` generators seeded from the test id."""
    seed = _seeds(request.node)["global"]
    torch.manual_seed(seed)
    random.seed(seed)


@pytest.fixture
def gen(request) -> torch.Generator:
    """A CPU generator seeded from the test id (a stream apart from the global generator's)."""
    return torch.Generator().manual_seed(_seeds(request.node)["gen"])


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


def _group_name(item) -> str:
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names))


def _shares_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    module = item.nodeid.split("::")[0]
    def made_per_module(defs) -> bool:  # the module's own fixture, or a conftest's above it
        where = defs[-1].baseid.split("::")[0]
        return defs[-1].scope in ("module", "class") and (where in ("", module)
                                                          or module.startswith(where + "/"))

    return info is not None and any(defs and made_per_module(defs) for defs in info.name2fixturedefs.values())


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook (a worker under --dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Groups of pytest-xdist workers (``--dist loadgroup``), made to work.

    The tests of a module that share a module- or class-scoped fixture of that module run in one worker
    (``xdist_group``, the module's path): the fixture is made once instead of once per worker (a claim
    trained, the site built, children run). A test's own ``xdist_group`` wins.

    pytest-xdist 3.8 tells the scheduler a test's group by appending ``@group`` to the test's node id
    through ``item._nodeid``; pytest 9.2 keeps the id in ``item._id``, so the suffix was lost and every
    group spread over the workers (pytest-dev/pytest-xdist#1386): a docs page's blocks ran in both
    workers, each running the page's earlier blocks again. The suffix is put where pytest reads it,
    where it is missing; the seeds keep the plain id."""
    if not config.getoption("loadgroup", default=False):
        return
    for item in items:
        if not _group_name(item) and _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        group = _group_name(item)
        if not group or item.nodeid.endswith("@" + group) or not hasattr(item, "_id"):
            continue
        item.stash[_PLAIN_ID] = item.nodeid
        item._id = type(item._id).parse(f"{item.nodeid}@{group}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries a "seed" section: the seeds it ran with and how to replay them."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("seed", replay_line(item)))
        item.config.stash.setdefault(_FAILED, []).append(f"{item.nodeid}: {replay_line(item)}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    failed = config.stash.get(_FAILED, [])
    if failed:
        terminalreporter.section("seeds of the failed tests")
        for line in failed:
            terminalreporter.write_line(line)


def pytest_report_header(config):
    return (f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}; test seeds from the "
            f"test ids, base {base_seed(config)} ({SEED_ENV} / --seed)")
