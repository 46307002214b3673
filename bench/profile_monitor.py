"""Where a monitored compiled step spends its extra time: ``python -m bench.profile_monitor``.

The training step of `bench.compile_monitor` (timm model, forward under ``torch.compile``,
backward, SGD step), plain and monitored, examined two ways:

- **Inductor's output code**: the Python modules Inductor generates for each variant are copied to
  ``--out`` (``plain_*.py``, ``monitored_*.py``) and summarised: generated C++/Triton kernels, calls into
  external ops (``extern_kernels.*``, ``torch.ops.*``, the ``vitplast`` custom ops) and buffers
  allocated, per variant, so the difference the monitor makes to the graph can be read off.
- **torch.profiler** over ``--steps`` steps of each variant (Inductor's C++ kernels annotated with their
  names, ``cpp.enable_kernel_profile``): a table of the operators and kernels whose total self time
  grew most from the plain to the monitored step, in ms per step.

Also the same in eager mode with ``--eager`` (the capture's hooks without compile). Writes
``summary.json`` beside the copied code.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

import vitplast_kernels as vk

from .harness import machine_info, machine_line


def _generated() -> set[str]:
    """Paths of the Python modules Inductor has generated and loaded in this process."""
    from torch._inductor.codecache import PyCodeCache

    mods = getattr(PyCodeCache, "modules", None)
    if mods is None:  # older layouts keep a cache dict
        mods = list(getattr(PyCodeCache, "cache", {}).values())
    return {m.__file__ for m in mods if getattr(m, "__file__", None)}


def summarise_code(src: str) -> dict[str, int]:
    """Counts in one generated module (comments left out): kernels defined and called, external calls,
    allocations, and the graph's outputs (what the forward hands to the backward or to Python)."""
    code = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("#"))
    kernels = len(re.findall(r"^(cpp_fused_\w+|triton_\w+)\s*=\s*async_compile", code, flags=re.M))
    launches = len(re.findall(r"^\s+(cpp_fused_\w+|triton_\w+)\(", code, flags=re.M))
    ext = collections.Counter(re.findall(r"(extern_kernels\.\w+|torch\.ops\.\w+\.\w+)(?:\.\w+)?\(", code))
    ret = re.findall(r"^        return \((.*)\)$", code, flags=re.M)
    names = r"reinterpret_tensor\(buf\d+|(?<!\()\bbuf\d+|primals_\d+"  # returned tensors, once each
    outputs = len(re.findall(names, ret[-1])) if ret else 0
    return {"kernels": kernels, "kernel_launches": launches, "outputs": outputs,
            "allocations": len(re.findall(r"\bempty_strided_\w+\(", code)),
            "extern_calls": sum(ext.values()), **{f"call {k}": v for k, v in sorted(ext.items())}}


def _self_ms(prof, steps: int) -> dict[str, float]:
    return {e.key: e.self_cpu_time_total / 1e3 / steps for e in prof.key_averages()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="vit_small_patch16_224")
    p.add_argument("--img-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=10, help="profiled steps per variant")
    p.add_argument("--eager", action="store_true", help="profile the eager step instead of the compiled one")
    p.add_argument("--top", type=int, default=25, help="rows of the difference table")
    p.add_argument("--out", default="bench_profile_monitor", help="folder for the code and summary.json")
    a = p.parse_args(argv)
    import timm

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch._inductor.config.cpp.enable_kernel_profile = True
    info = machine_info(torch.device("cpu"))
    print(machine_line(info))
    torch.manual_seed(0)
    model = timm.create_model(a.model, img_size=a.img_size, num_classes=10, pretrained=False)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(a.batch_size, 3, a.img_size, a.img_size, generator=gen)
    y = torch.randint(0, 10, (a.batch_size,), generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    mon = vk.monitor(model, every=1)
    fwd = model if a.eager else torch.compile(model)

    def step():
        F.cross_entropy(fwd(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    code: dict[str, dict] = {}
    for name, on in (("plain", False), ("monitored", True)):
        before = _generated()
        with mon.measuring(on):
            step()
            step()
        for i, path in enumerate(sorted(_generated() - before)):
            src = Path(path).read_text()
            shutil.copy(path, out / f"{name}_{i}.py")
            code[f"{name}_{i}"] = summarise_code(src)
    for k, v in code.items():
        print(f"{k}: " + ", ".join(f"{n} {c}" for n, c in v.items() if not n.startswith("call ")))
        print("    " + ", ".join(f"{n[5:]} x{c}" for n, c in v.items() if n.startswith("call ")))

    from torch.profiler import ProfilerActivity, profile

    tables = {}
    for name, on in (("plain", False), ("monitored", True), ("plain", False), ("monitored", True)):
        with mon.measuring(on), profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(a.steps):
                step()
        t = _self_ms(prof, a.steps)
        if name in tables:  # the second profile of each variant: keep the smaller (less disturbed)
            t = {k: min(v, tables[name].get(k, v)) for k, v in t.items()}
        tables[name] = t
    plain, mont = tables["plain"], tables["monitored"]
    tot_p, tot_m = sum(plain.values()), sum(mont.values())
    diff = sorted(((mont.get(k, 0.0) - plain.get(k, 0.0), k) for k in set(plain) | set(mont)), reverse=True)
    print(f"\nself CPU time per step: plain {tot_p:.1f} ms, monitored {tot_m:.1f} ms "
          f"(+{tot_m - tot_p:.1f} ms); largest increases (ms per step):")
    for d, k in diff[: a.top]:
        print(f"  {d:+8.2f}  {plain.get(k, 0.0):8.2f} -> {mont.get(k, 0.0):8.2f}  {k[:100]}")
    summary = {"machine": info, "args": vars(a), "code": code, "self_ms_per_step": tables,
               "top_increases": [(k, d) for d, k in diff[: a.top]]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\ngenerated code and summary.json in {out}/")
    return summary


if __name__ == "__main__":
    main()
