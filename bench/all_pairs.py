"""All-pairs distance matrices: ours vs ``torch.cdist`` vs the mm formula, time and accuracy.

``rows(device, quick)`` -> list of dicts (one per case and method), used by bench/compare.py; run as a
module to print the table: ``python -m bench.all_pairs [--device cpu|cuda] [--quick] [--json PATH]``.

Cases and their targets:
- CPU, N=128 sequences, K=257*384 (ViT-Small tokens x channels), float32: ours >= 3x cdist and >= 50%
  (random rows) / 40% (shared rows) of the float32 matmul rate measured in the same run, at equal or
  better accuracy.
- CUDA, N=256, K=257*1280 (ViT-Huge), bfloat16: ours >= 2x cdist on float32 up-casts, >= 50% of the
  bf16 matmul rate measured in the same run, counting only one triangle's FLOPs ``N(N+1)/2 * K * 2``.
Each size runs on ``random`` rows and on ``shared`` rows (a common component 10x the per-row spread,
like positional embeddings or massive activations, plus identical and near-duplicate pairs): the Gram
formula's hard case. ``err`` is the max over pairs of the relative error of the distance against
float64; ``dup0`` says whether identical pairs come out exactly 0. Peers run on float32 up-casts made
before timing (their cast is not timed). ``c_gram`` (in NOTE) is the measured Gram error constant of our
split-K Gram (``max rel_err(d) * S_ij/(n_i+n_j) / (u sqrt(L/S))``), on both cases (on GPU the tensor
cores' truncation bias shows on ``random`` rows and mostly cancels on ``shared`` ones), to compare with
the constant the trust threshold assumes (``C_CPU`` on CPU; on GPU the effective ``eps / (u sqrt(L/S))``
of ``backends.triton.all_pairs.gram_eps``, which includes the in-MMA truncation term).
"""

from __future__ import annotations

import argparse
import math

import torch

import vitplast_kernels as vk
from vitplast_kernels import numerics
from vitplast_kernels.backends import cpu as ap

from .harness import machine_info, matmul_rate, print_table, time_interleaved, write_json

COLUMNS = [
    ("case", "case", None),
    ("shape", "N x K", None),
    ("dtype", "dtype", None),
    ("method", "method", None),
    ("ms", "ms", ".2f"),
    ("x_cdist", "x vs cdist", ".2f"),
    ("TFLOPs", "TFLOP/s 1 tri", ".3f"),
    ("pct_mm", "% mm rate", ".0f"),
    ("err", "max rel err", ".1e"),
    ("dup0", "dup0", None),
]
NOTE = None  # set by rows(): machine floors and Gram calibration


def make_rows(n: int, k: int, dtype: torch.dtype, kind: str, device: str, seed: int = 0) -> torch.Tensor:
    """``(N, K)`` test rows: ``random`` (iid normal) or ``shared`` (common component, duplicates)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, k, generator=g)
    if kind == "shared":
        a += 10 * torch.randn(k, generator=g)
        a[1] = a[0]
        for row, rel in ((3, 1e-3), (5, 1e-5)):
            a[row] = a[row - 1] + rel * torch.randn(k, generator=g)
    return a.to(dtype).to(device)


def mm_formula(x: torch.Tensor) -> torch.Tensor:
    """The textbook ``sqrt(n_i + n_j - 2 x x^T)`` (what most codebases write), float32."""
    n = x.square().sum(1)
    return (n[:, None] + n[None, :] - 2 * (x @ x.T)).clamp_min(0).sqrt()


def _max_rel_err(dist: torch.Tensor, ref_sq: torch.Tensor) -> tuple[float, bool]:
    ref = ref_sq.sqrt()
    off = ~torch.eye(ref.shape[0], dtype=torch.bool, device=ref.device)
    ok = off & (ref > 0)
    err = ((dist.double() - ref).abs() / ref)[ok].max().item()
    dup = off & (ref == 0)
    return err, bool(dist[dup].eq(0).all().item())


def _gram_constant(x: torch.Tensor, ref_sq: torch.Tensor) -> tuple[float, int, int]:
    """Measured ``c`` of our split-K Gram (no recompute) on ``x``: (c, S, L)."""
    k = x.shape[1]
    if x.device.type == "cuda":
        from vitplast_kernels.backends.triton import all_pairs as tap

        plan = tap.launch_plan(x)
        sq = tap.all_pair_sq_distances_triton(x, tau=0.0).double()
        splits, chunk = plan["splits"], plan["chunk"]
        norms = x.double().square().sum(1)
    else:
        gram, splits = ap._split_gram(x.float(), ap.CPU_CHUNK)
        chunk = math.ceil(k / splits)
        norms = gram.diagonal()
        sq = (norms[:, None] + norms[None, :] - 2 * gram).clamp_min(0)
    scale = norms[:, None] + norms[None, :]
    off = ~torch.eye(x.shape[0], dtype=torch.bool, device=x.device) & (ref_sq > 0)
    rel = (sq.sqrt() - ref_sq.sqrt()).abs() / ref_sq.sqrt()
    c = (rel * ref_sq / scale)[off].max().item() / (numerics.U32 * math.sqrt(chunk / splits))
    return c, splits, chunk


def _case_rows(case: str, x: torch.Tensor, device: str, mm_flops: float) -> tuple[list[dict], float]:
    n, k = x.shape
    xf = x.float()
    ref = vk.all_pair_sq_distances_reference(x)
    fns = {
        "ours": lambda: vk.all_pair_distances(x),
        "torch.cdist": lambda: torch.cdist(xf, xf),
        "mm formula": lambda: mm_formula(xf),
    }
    timings = time_interleaved(fns, device=device, min_rounds=5, min_time=0.5)
    flops = n * (n + 1) / 2 * k * 2
    t_cdist = timings["torch.cdist"].median
    rows = []
    for name, fn in fns.items():
        t = timings[name].median
        err, dup0 = _max_rel_err(fn(), ref)
        rows.append({
            "case": case, "shape": f"{n}x{k}", "dtype": str(x.dtype).replace("torch.", ""),
            "method": name, "ms": t * 1e3, "x_cdist": t_cdist / t, "TFLOPs": flops / t / 1e12,
            "pct_mm": 100 * flops / t / mm_flops, "err": err, "dup0": "yes" if dup0 else "NO",
        })
    c, _, _ = _gram_constant(x, ref)
    return rows, c


def rows(device: str = "cpu", quick: bool = False) -> list[dict]:
    """Table rows for ``device`` (``"cpu"`` or ``"cuda"``); ``quick`` skips the fp32 GPU case."""
    global NOTE
    if device == "cuda":
        mm_dtype, cases = torch.bfloat16, [(256, 257 * 1280, torch.bfloat16)]
        if not quick:
            cases.append((256, 257 * 1280, torch.float32))
    else:
        mm_dtype, cases = torch.float32, [(128, 257 * 384, torch.float32)]
    mm_flops = matmul_rate(device, mm_dtype)
    out, consts, assumed = [], [], []
    for n, k, dtype in cases:
        for kind in ("random", "shared"):
            x = make_rows(n, k, dtype, kind, device)
            r, c = _case_rows(kind, x, device, mm_flops)
            out += r
            consts.append(f"{dtype} {kind} c_gram={c:.3f}")
        if device == "cuda":
            from vitplast_kernels.backends.triton import all_pairs as tap

            plan = tap.launch_plan(x)
            eps = tap.gram_eps(x)
            c_eff = eps / (numerics.U32 * math.sqrt(plan["chunk"] / plan["splits"]))
            assumed.append(
                f"{dtype}: eps={eps:.2e} (c_eff={c_eff:.2f}"
                f", C_GPU={tap.C_GPU}, flush every {plan['flush_k']} products, BK={plan['BK']}, "
                f"S={plan['splits']}, L={plan['chunk']}, tau={numerics.reliability_threshold(eps):.3f})"
            )
    if device != "cuda":
        assumed.append(f"C_CPU={numerics.C_CPU}")
    NOTE = (
        f"{mm_dtype} torch.mm rate measured in this run: {mm_flops / 1e12:.3f} TFLOP/s; FLOPs counted: "
        f"one triangle N(N+1)/2*K*2 for every method. Gram error constant measured (Gram alone): "
        f"{', '.join(consts)} (threshold assumes {'; '.join(assumed)}). Peers run on float32 up-casts."
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", help="write rows, note and machine info to this file")
    args = p.parse_args(argv)
    table = rows(args.device, args.quick)
    print_table(f"all pairs on {args.device}", table, COLUMNS, NOTE)
    if args.json:
        write_json(args.json, {"rows": table, "note": NOTE, "machine": machine_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
