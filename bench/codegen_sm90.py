"""What the compiler makes of the Triton kernels (and the built CUDA kernel) for an H200 (sm_90),
without a GPU.

Compiles every Triton kernel of the package ahead of time for ``sm_90`` at the benchmark shapes,
with the specialisations the JIT applies at launch (16-divisible pointers and integers, as
``triton.compile`` receives them from a real launch), and reports per kernel: registers, stack
bytes (spills), shared memory, whether the main loop is software-pipelined (``cp.async`` copies
issued ahead of the MMAs), warpgroup MMAs, float32 adds on whole MMA tiles (the Gram's accumulator
flush, which its error model relies on), 16-byte global loads. ``--check`` turns the expectations
(the Gram loop pipelined on wgmma with its flush kept, no kernel spilling beyond a few words, 16-byte
loads where the layout allows them, a small contiguous grouped kernel) into an exit status: 1 when one
is missed, 3 when this triton's ahead-of-time API or ptxas is not the one this script knows (the CPU
test suite runs it and skips on 3). The CUDA extension's kernel, when built, is read from its sm_90
SASS: registers (at most 85 for 3 blocks of 256 threads per SM), stack frame, 128-bit loads.

    python bench/codegen_sm90.py [--check] [--json PATH]

Must run without ``TRITON_INTERPRET=1`` (interpreted kernels cannot be compiled). Uses the ptxas
bundled with triton; takes ~5 s on 2 cores. Numbers are what ptxas reports for sm_90, not timings.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import triton
import triton.compiler as tc
from triton.backends.compiler import GPUTarget

SMS = 132  # H200
# a few spilled words outside the hot loop are harmless (the float32 tf32x3 Gram at BM=128 spills
# 16-28 B: 2 x 64 accumulator registers per thread plus the three-way operand split)
SPILL_TOLERANCE = 64
UNSUPPORTED = 3  # exit status: this triton cannot compile ahead of time the way this script does it
TARGET = GPUTarget("cuda", 90, 32)


@dataclass
class Report:
    kernel: str
    config: str
    registers: int
    spill_bytes: int  # ptxas "bytes spill stores"
    stack_bytes: int
    shared_bytes: int
    async_copies: int  # cp.async instructions in the PTX (software pipelining of global -> shared)
    wgmma: int  # wgmma.mma_async instructions
    vec16_loads: int  # 16-byte global loads (ld.global.*.v4.b32 / .v2.b64)
    mma_adds: int  # float32 adds on whole MMA-layout tiles in the TTGIR (the Gram's accumulator flush)
    problems: list[str]


def _ptxas() -> str:
    here = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return os.environ.get("TRITON_PTXAS_PATH", str(here))


def _ptxas_usage(ptx: str) -> tuple[int, int, int]:
    """(registers, spill store bytes, stack frame bytes) of the kernel in ``ptx`` for sm_90a."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        arch = re.search(r"\.target\s+(sm_\w+)", ptx).group(1)
        out = subprocess.run([_ptxas(), f"-arch={arch}", "-v", str(src), "-o", str(Path(tmp) / "k.o")],
                             capture_output=True, text=True, check=True).stderr
    regs = int(re.search(r"Used (\d+) registers", out).group(1))
    spill = int(re.search(r"(\d+) bytes spill stores", out).group(1))
    stack = int(re.search(r"(\d+) bytes stack frame", out).group(1))
    return regs, spill, stack


def _signature(fn, args: dict) -> tuple[dict, dict, dict]:
    """Types, constexprs and divisibility attributes as a JIT launch with these values would give:
    pointers are ``"*dtype"`` strings (16-byte aligned), ints divisible by 16 get ``tt.divisibility``."""
    constexpr_names = {fn.arg_names[i] for i in fn.constexprs}
    sig, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        v = args[name]
        if isinstance(v, str) and v.startswith("*"):
            sig[name] = v
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, bool) or name in constexpr_names:
            sig[name], consts[name] = "constexpr", v
        elif isinstance(v, int):
            sig[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, float):
            sig[name] = "fp32"
        else:
            raise TypeError(f"{name}: unsupported example value {v!r}")
    return sig, consts, attrs


def compile_report(fn, args: dict, *, num_warps: int, num_stages: int = 3, config: str = "") -> Report:
    if not isinstance(fn, triton.runtime.JITFunction):
        raise RuntimeError("kernels are interpreted (TRITON_INTERPRET=1): run without it")
    sig, consts, attrs = _signature(fn, args)
    src = tc.ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    k = triton.compile(src, target=TARGET, options={"num_warps": num_warps, "num_stages": num_stages})
    ptx = k.asm["ptx"]
    regs, spill, stack = _ptxas_usage(ptx)
    return Report(
        kernel=fn.__name__, config=config, registers=regs, spill_bytes=spill, stack_bytes=stack,
        shared_bytes=int(k.metadata.shared), async_copies=ptx.count("cp.async.cg") + ptx.count("cp.async.ca"),
        wgmma=ptx.count("wgmma.mma_async"),
        vec16_loads=len(re.findall(r"ld\.global[\w.]*\.(?:v4\.(?:b32|f32|u32)|v2\.(?:b64|f64|u64))", ptx)),
        mma_adds=len(re.findall(r"arith\.addf .*: tensor<\d+x\d+xf32, #mma", k.asm["ttgir"])),
        problems=[f"spills {spill} B"] if spill > SPILL_TOLERANCE else [],
    )


# ---------------------------------------------------------------------------------------------
# the kernels at the benchmark shapes


def all_pairs_reports(n: int = 256, k: int = 257 * 1280) -> list[Report]:
    import torch

    from vitplast_kernels.backends.triton import all_pairs as tap

    out = []
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        for bm, bk, warps, stages in tap._CUDA_CONFIGS:
            tiles = tap.num_tiles_of(n, bm)
            s, chunk = tap._splits(tiles, k, bk, torch.device("cpu"), tap.splits_for(tiles, SMS))
            prec = "tf32x3" if dtype == torch.float32 else "tf32"
            args = dict(x_ptr=f"*{name}", ws_ptr="*fp32", tiles_ptr="*i32", N=n, K=k, stride_row=k,
                        chunk=chunk, BM=bm, BK=bk, PREC=prec, MASK_ROWS=n % bm != 0, MASK_K=k % bk != 0,
                        UPCAST=False, F=tap.flush_steps(bk))
            r = compile_report(tap._gram_partial_kernel, args, num_warps=warps, num_stages=stages,
                               config=f"{name} BM={bm} BK={bk} w={warps} st={stages} S={s}")
            if r.async_copies == 0:
                r.problems.append("main loop not pipelined (no cp.async)")
            if r.wgmma == 0:
                r.problems.append("no wgmma")
            if dtype != torch.float32 and r.mma_adds < 2:  # the flush in the loop + the one after it
                r.problems.append("MMA accumulator flush folded away (error model assumes it)")
            out.append(r)
        bm, bk = tap._CUDA_CONFIGS[0][:2]
        tiles = tap.num_tiles_of(n, bm)
        s, _ = tap._splits(tiles, k, bk, torch.device("cpu"), tap.splits_for(tiles, SMS))
        rows = tap.FINISH_ROWS
        out.append(compile_report(
            tap._gram_finish_kernel,
            dict(ws_ptr="*fp32", tiles_ptr="*i32", out_ptr="*fp64", N=n, S=s, tau=0.7, floor=1e-20, BM=bm,
                 ROWS=rows,
                 SB=tap.FINISH_SB),
            num_warps=tap.FINISH_WARPS, config=f"{name} BM={bm} ROWS={rows} SB={tap.FINISH_SB}"))
        r = compile_report(
            tap._recompute_kernel,
            dict(x_ptr=f"*{name}", out_ptr="*fp64", N=n, K=k, stride_row=k, JB=tap.RECOMPUTE_JB,
                 BLOCK=tap.RECOMPUTE_BLOCK),
            num_warps=4, config=f"{name} JB={tap.RECOMPUTE_JB} BLOCK={tap.RECOMPUTE_BLOCK}")
        if r.vec16_loads == 0:
            r.problems.append("no 16-byte loads")
        out.append(r)
    return out


def paired_reports(rows: int = 128, k: int = 257 * 1280) -> list[Report]:
    from vitplast_kernels.backends.triton import paired as tp

    chunk = tp.chunk_size(rows, k)
    out = []
    for dt, vec in (("bf16", 8), ("fp32", 4)):
        args = dict(a_ptr=f"*{dt}", b_ptr=f"*{dt}", partial_ptr="*fp64", K=k, nchunks=math.ceil(k / chunk),
                    chunk=chunk, a_bs=k, a_inner=k, a_os=k, b_bs=k, b_inner=k, b_os=k, CONTIG=True,
                    ALIGNED=True, VEC=vec, BLOCK=tp.BLOCK)
        r = compile_report(tp._stage1_single, args, num_warps=tp.STAGE1_WARPS, config=f"{dt} contiguous")
        if r.vec16_loads == 0:
            r.problems.append("aligned contiguous rows without 16-byte loads")
        out.append(r)
        args["CONTIG"] = False
        out.append(compile_report(tp._stage1_single, args, num_warps=tp.STAGE1_WARPS, config=f"{dt} strided"))
        for strided in (False, True):
            args = dict(base_ptr=f"*{dt}", offsets_ptr="*i64", layout_ptr="*i64", task_group_ptr="*i32",
                        partial_ptr="*fp64", NCOL=tp._NCOL, ALIGNED=True, VEC=vec, BLOCK=tp.BLOCK,
                        STRIDED=strided)
            r = compile_report(tp._stage1_grouped, args, num_warps=tp.STAGE1_WARPS,
                               config=f"{dt} group, {'any layout' if strided else 'contiguous rows'}")
            if not strided and r.registers > 64:
                r.problems.append("contiguous group above 64 registers (< 4 programs per SM)")
            out.append(r)
    out.append(compile_report(
        tp._stage2, dict(partial_ptr="*fp64", out_ptr="*fp64", rows=rows, layout_ptr="*i64",
                         nchunks_single=math.ceil(k / chunk), GROUPED=False, NCOL=tp._NCOL,
                         BLOCK=tp.STAGE2_BLOCK),
        num_warps=tp.STAGE2_WARPS, config="single"))
    return out


CUDA_MAX_REGISTERS = 85  # __launch_bounds__(256, 3): 3 x 256 threads x 85 <= 65536 registers per SM
CUDA_MAX_STACK = 64


def cuda_reports() -> list[Report]:
    """The CUDA extension's kernels as built (sm_90 SASS of vitplast_kernels/_C_cuda*.so, read with the
    cuobjdump bundled with triton): registers, stack frame, 128-bit loads; empty if not built."""
    import vitplast_kernels

    libs = sorted(Path(vitplast_kernels.__file__).parent.glob("_C_cuda*.so"))
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not libs or not tool.exists():
        return []
    text = subprocess.run([str(tool), "-res-usage", str(libs[0])], capture_output=True, text=True).stdout
    sass = subprocess.run([str(tool), "-sass", "-arch", "sm_90", str(libs[0])], capture_output=True,
                          text=True).stdout
    vec16: dict[str, int] = {}  # function -> 128-bit global loads in its sm_90 SASS
    current = None
    for line in sass.splitlines():
        if m := re.search(r"Function : (\S+)", line):
            current = m.group(1)
            vec16[current] = 0
        elif current and "LDG.E.128" in line:
            vec16[current] += 1
    out, arch, name = [], None, None
    for line in text.splitlines():
        if m := re.match(r"\s*arch = (sm_\d+)", line):
            arch = m.group(1)
        elif m := re.match(r"\s*Function (\S+):", line):
            name = m.group(1)
        elif arch == "sm_90" and name and (m := re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", line)):
            dtype = re.search(r"paired_kernelI(?:N3c10(\d+)(\w+?)E|(f))E", name)
            label = (dtype.group(2) or "float") if dtype else name[:20]
            regs, stack, shared = map(int, m.groups())
            r = Report(kernel="cuda paired_kernel", config=f"{label} (built .so)", registers=regs,
                       spill_bytes=stack, stack_bytes=stack, shared_bytes=shared, async_copies=0, wgmma=0,
                       vec16_loads=vec16.get(name, 0), mma_adds=0, problems=[])
            if regs > CUDA_MAX_REGISTERS:
                r.problems.append(f"more than {CUDA_MAX_REGISTERS} registers: < 3 blocks per SM")
            if stack > CUDA_MAX_STACK:
                r.problems.append(f"stack frame {stack} B")
            if r.vec16_loads == 0:
                r.problems.append("no 128-bit loads")
            out.append(r)
            name = None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a kernel misses its expectations")
    ap.add_argument("--json", type=Path, help="also write the reports here")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("codegen_sm90: unset TRITON_INTERPRET (interpreted kernels cannot be compiled)",
              file=sys.stderr)
        return 2
    try:
        reports = all_pairs_reports() + paired_reports() + cuda_reports()
    except (ImportError, AttributeError, TypeError, FileNotFoundError, subprocess.CalledProcessError) as exc:
        # this triton's ahead-of-time API or bundled ptxas differs from the one this script knows
        print(f"codegen_sm90: cannot compile ahead of time with triton {triton.__version__}: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return UNSUPPORTED
    print(f"# triton {triton.__version__}, target sm_90 (H200), compiled ahead of time; ptxas -v figures")
    head = (f"{'kernel':24} {'config':38} {'regs':>4} {'spill':>5} {'smem KB':>7} {'cp.async':>8} "
            f"{'wgmma':>5} {'flush':>5} {'16B ld':>6}  problems")
    print(head)
    print("-" * len(head))
    for r in reports:
        print(f"{r.kernel:24} {r.config:38} {r.registers:4d} {r.spill_bytes:5d} {r.shared_bytes / 1024:7.0f} "
              f"{r.async_copies:8d} {r.wgmma:5d} {r.mma_adds:5d} {r.vec16_loads:6d}  "
              f"{'; '.join(r.problems) or '-'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in reports], indent=1))
    bad = [r for r in reports if r.problems]
    if args.check and bad:
        print(f"codegen_sm90: {len(bad)} kernel(s) miss their expectations", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
