"""Bitwise determinism: the same inputs on the same device and backend give the same bits in two fresh
processes, and a tensor reduced inside a group gives the bits it gives alone.

Each cross-process test starts two children (``python -c``) that build the same seeded inputs (odd
shapes, float32/float16/bfloat16, non-contiguous views), run the paired, grouped and all-pairs ops
and save the outputs; the parent compares raw bits. CPU backends and Triton (``TRITON_INTERPRET=1``
set in the child's environment before anything imports triton) run here; the CUDA and Triton GPU
kernels in the ``gpu`` tests (``make gpu-check``). ``VITPLAST_AUTOTUNE`` is removed from the children's
environment: the default plans are the ones under test (the opt-in is documented as not repeatable).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import carved_pair, lane_pattern_inputs

import vitplast_kernels as vk
from vitplast_kernels.backends.registry import usable

SEED = 20260101  # fixed: both children must build the same inputs
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HERE = Path(__file__).resolve().parent  # this file's folder: the child imports test_determinism from it
TESTS = HERE.parent  # tests/: helpers.py
ROOT = TESTS.parent
GPU = torch.cuda.is_available()


def _interpreted_triton() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1" and usable("triton")


CPU_BACKENDS = [b for b in ("cpu", "torch") if usable(b)] + (["triton"] if _interpreted_triton() else [])


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor, as integers of the same width (NaN == NaN, -0 != +0)."""
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}
    return t.detach().contiguous().view(ints[t.element_size()])


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and torch.equal(bits(x.cpu()), bits(y.cpu()))


# ---------------------------------------------------------------------------------------------
# inputs and the work both children do


def _rand(gen, shape, dtype, device, scale=1.0):
    return (torch.randn(shape, generator=gen) * scale).to(dtype).to(device)


def group_inputs(dtype, device, gen, *, rows=3, wide=9 * 4096 + 5):
    """(xs, ys): pairs sharing ``rows`` sequences, of different widths and layouts: contiguous, odd
    sizes, every other row of a batch, a slice with strided runs, a transposed view (copied), and rows
    long enough to be cut into several chunks by every kernel."""
    big = _rand(gen, (2 * rows, 7, 41), dtype, device)
    runs = _rand(gen, (rows, 3, 300), dtype, device)
    xs = [_rand(gen, (rows, 5, 13), dtype, device), big[::2], runs[:, :, 100:229],
          _rand(gen, (rows, 11, 4), dtype, device).transpose(1, 2), _rand(gen, (rows, wide), dtype, device)]
    ys = [_rand(gen, (rows, 5, 13), dtype, device), big[1::2], runs[:, :, 7:136],
          _rand(gen, (rows, 4, 11), dtype, device), _rand(gen, (rows, wide), dtype, device)]
    lx, ly = lane_pattern_inputs(dtype, device, gen, rows=rows)
    return xs + [lx], ys + [ly]



def all_pairs_inputs(dtype, device, gen, *, n=11):
    """Odd ``n`` rows (not a multiple of any tile), contiguous and a strided view, near-duplicates."""
    x = _rand(gen, (n, 5, 13), dtype, device)
    x[3] = x[7]
    x[5] = x[9] + (1e-3 * _rand(gen, (5, 13), torch.float32, device)).to(dtype)  # near-duplicate
    view = _rand(gen, (2 * n, 45), dtype, device)[::2, 2:43]
    return {"contiguous": x, "strided": view}


def run_all(device: str, backends: list[str], sizes: dict | None = None) -> dict[str, torch.Tensor]:
    """Every op of every backend on the seeded inputs: ``{"backend/op/dtype/name": output on CPU}``."""
    sizes = sizes or {}
    out = {}
    for dtype in DTYPES:
        gen = torch.Generator().manual_seed(SEED)
        xs, ys = group_inputs(dtype, device, gen, **sizes.get("group", {}))
        mats = all_pairs_inputs(dtype, device, gen, **sizes.get("all", {}))
        # the CPU kernels stage b when it lies 2^28 bytes from a (csrc/cpu/stream_alias.h)
        aliased = carved_pair(xs[-1], ys[-1], 2**28) if device == "cpu" else None
        tag = str(dtype).removeprefix("torch.")
        for backend in backends:
            for g, (x, y) in enumerate(zip(xs, ys, strict=True)):
                out[f"{backend}/pair/{tag}/{g}"] = vk.pair_sq_distances(x, y, backend=backend)
            out[f"{backend}/grouped/{tag}"] = vk.pair_sq_distances_grouped(xs, ys, backend=backend)
            if device == "cpu":
                out[f"{backend}/aliased/{tag}"] = vk.pair_sq_distances(*aliased, backend=backend)
            if backend in vk.backend_names("all_pairs"):
                for name, m in mats.items():
                    out[f"{backend}/all/{tag}/{name}"] = vk.all_pair_sq_distances(m, backend=backend)
    return {k: v.cpu() for k, v in out.items()}


_CHILD = """
import sys
sys.path[:0] = [{here!r}, {tests!r}]
import torch
from test_determinism import run_all
torch.save(run_all({device!r}, {backends!r}, {sizes!r}), {out!r})
"""


def run_in_fresh_processes(tmp_path: Path, device: str, backends: list[str], env: dict[str, str],
                           sizes: dict | None = None, timeout: float = 300) -> list[dict]:
    """The outputs of `run_all` in two fresh Python processes (started together)."""
    child_env = {k: v for k, v in os.environ.items()
                 if k not in ("VITPLAST_AUTOTUNE", "VITPLAST_GPU_BACKEND", "TRITON_INTERPRET")}
    child_env.update(env)
    paths = [tmp_path / f"run{i}.pt" for i in range(2)]
    procs = [subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(here=str(HERE), tests=str(TESTS), device=device,
                                             backends=backends, sizes=sizes or {}, out=str(path))],
        cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for path in paths]
    for i, proc in enumerate(procs):
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        assert proc.returncode == 0, f"child {i} failed:\n{err[-4000:]}"
    return [torch.load(path) for path in paths]


def assert_same_bits(first: dict, second: dict, backend: str) -> None:
    keys = sorted(k for k in first if k.startswith(backend + "/"))
    assert keys and keys == sorted(k for k in second if k.startswith(backend + "/"))
    differ = [k for k in keys if not same_bits(first[k], second[k])]
    assert not differ, f"different bits in two processes (seed {SEED}): {differ}"


# ---------------------------------------------------------------------------------------------
# CPU backends and the Triton interpreter


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    env = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return run_in_fresh_processes(tmp_path_factory.mktemp("det_cpu"), "cpu", CPU_BACKENDS, env)


@pytest.mark.slow
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_two_processes_give_the_same_bits(cpu_runs, backend):
    assert_same_bits(*cpu_runs, backend)


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


@pytest.mark.slow
@pytest.mark.skipif(not usable("cpu") or not {"avx512f", "avx512dq", "avx2", "fma", "f16c"} <= _cpu_flags(),
                    reason="needs the C++ extension on a CPU with AVX-512 F/DQ (and AVX2/FMA/F16C)")
def test_avx512_kernel_gives_the_avx2_kernels_bits(tmp_path):
    # the AVX-512 float32 kernel keeps the AVX2 kernel's lanes and order of operations: same bits, every
    # dtype, layout and op; VITPLAST_CPU_KERNEL caps the choice in each pair of children
    runs = {}
    for kernel in ("auto", "avx2", "generic"):
        (tmp_path / kernel).mkdir()
        runs[kernel] = run_in_fresh_processes(tmp_path / kernel, "cpu", ["cpu"],
                                              {"CUDA_VISIBLE_DEVICES": "", "VITPLAST_CPU_KERNEL": kernel})
    fastest, avx2, generic = runs["auto"], runs["avx2"], runs["generic"]
    assert_same_bits(fastest[0], avx2[0], "cpu")
    # the cap is read: the generic loop sums float16 squares in float64, the AVX2 kernels in float32
    # lanes flushed to float64 every 64 squares per lane (the float32 kernels agree on these inputs: the
    # squares of differences of like magnitudes are exact in float64, FMA or not; so do the bfloat16
    # ones, whose float32 lanes hold only 8 squares between flushes; AVX-512 and AVX2 cannot be told
    # apart by bits)
    assert not same_bits(generic[0]["cpu/grouped/float16"], avx2[0]["cpu/grouped/float16"])


def _group_vs_alone(backend: str, device: str, dtype, **sizes) -> None:
    gen = torch.Generator().manual_seed(SEED)
    xs, ys = group_inputs(dtype, device, gen, **sizes)
    alone = [vk.pair_sq_distances(x, y, backend=backend) for x, y in zip(xs, ys, strict=True)]
    n = len(xs)
    # the whole group, reversed, one member, the group twice over, every other member
    for order in (list(range(n)), list(range(n))[::-1], [n - 1], list(range(n)) * 2, list(range(0, n, 2))):
        got = vk.pair_sq_distances_grouped([xs[i] for i in order], [ys[i] for i in order], backend=backend)
        for row, i in enumerate(order):
            assert same_bits(got[row], alone[i]), (
                f"{backend} {dtype}: tensor {i} gives other bits in the group {order} than alone: "
                f"{got[row].tolist()} vs {alone[i].tolist()} (seed {SEED})")


@pytest.mark.slow
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_in_a_group_gives_its_bits_alone(backend, dtype):
    _group_vs_alone(backend, "cpu", dtype)


def test_all_pairs_triton_plan_is_fixed_unless_autotune(monkeypatch):
    # the CUDA plan follows from the shape alone; timing happens only under VITPLAST_AUTOTUNE=1
    pytest.importorskip("triton")
    from vitplast_kernels.backends.triton import all_pairs as tap

    def timed(x):
        raise AssertionError("timed a plan without the opt-in")

    monkeypatch.setattr(tap, "_timed_config", timed)
    monkeypatch.delenv("VITPLAST_AUTOTUNE", raising=False)
    for n in (2, 64, 65, 300, 70_000):
        fake = SimpleNamespace(device=torch.device("cuda", 0), shape=(n, 1024))
        cfg, splits = tap._plan_for(fake, None, None)
        assert cfg == tap._fitting(n)[0] and splits is None
        assert cfg[0] == (64 if n <= 64 else 128)
    monkeypatch.setenv("VITPLAST_AUTOTUNE", "1")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(tap, "_timed_config", lambda x: ((64, 64, 4, 4), 7))
    assert tap._plan_for(SimpleNamespace(device=torch.device("cuda", 0), shape=(300, 8)), None, None) == (
        (64, 64, 4, 4), 7)


# Differences whose squares are float32 subnormals (|d| ~ 1e-20: d^2 ~ 1e-40) add up to a normal
# number over a few thousand elements: a kernel that flushed subnormals would return 0.
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("scale", [1e-20, 1e-39])
def test_subnormal_scale_inputs_agree_across_backends(backend, scale):
    gen = torch.Generator().manual_seed(SEED)
    a = torch.randn(2, 6000, generator=gen) * scale
    b = torch.randn(2, 6000, generator=gen) * scale
    got = vk.pair_sq_distances(a, b, backend=backend).double()
    ref = vk.pair_sq_distances_reference(a, b).double()
    base = vk.pair_sq_distances(a, b, backend="torch").double()
    if scale == 1e-20:  # the float32 sum is a normal number: every backend must find it
        assert (ref > 1e-37).all() and ((got - ref).abs() <= 1e-3 * ref).all(), (got, ref)
    assert torch.allclose(got, base, rtol=1e-3, atol=0.0), f"{backend} {got} vs torch {base}"


# ---------------------------------------------------------------------------------------------
# GPU: the CUDA and Triton kernels (make gpu-check)

GPU_SIZES = {"group": {"rows": 8, "wide": 257 * 1280 + 3}, "all": {"n": 300}}


@pytest.fixture(scope="module")
def gpu_runs(tmp_path_factory):
    backends = [b for b in ("cuda", "triton") if usable(b)] + ["auto"]
    return run_in_fresh_processes(tmp_path_factory.mktemp("det_gpu"), "cuda", backends, {}, GPU_SIZES)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs CUDA")
@pytest.mark.parametrize("backend", ["cuda", "triton", "auto"])
def test_gpu_two_processes_give_the_same_bits(gpu_runs, backend):
    if backend != "auto" and not usable(backend):
        pytest.skip(f"backend {backend} not available")
    assert_same_bits(*gpu_runs, backend)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs CUDA")
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_tensor_in_a_group_gives_its_bits_alone(backend, dtype):
    # rows of 257 x 1280 elements: alone a tensor is cut into chunks by its own size, which a policy
    # based on the group's total size would change
    if not usable(backend):
        pytest.skip(f"backend {backend} not available")
    _group_vs_alone(backend, "cuda", dtype, **GPU_SIZES["group"])


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs CUDA")
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_gpu_keeps_subnormal_squares(backend):
    if not usable(backend):
        pytest.skip(f"backend {backend} not available")
    gen = torch.Generator().manual_seed(SEED)
    a, b = (torch.randn(4, 257 * 64, generator=gen) * 1e-20 for _ in range(2))
    ref = vk.pair_sq_distances_reference(a, b).double()
    got = vk.pair_sq_distances(a.cuda(), b.cuda(), backend=backend).double().cpu()
    assert ((got - ref).abs() <= 1e-3 * ref).all(), f"{backend}: {got} vs {ref} (flushed subnormals?)"
