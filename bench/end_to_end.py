"""End-to-end section of bench.compare: a whole measurement step on a timm ViT (random weights).

Per model: seconds per batch of the plain forward, of forward + ``vitplast_kernels.capture``
(in_situ, halves, result read on the host; one capture built before the rounds and attached for each
step, as a measurement keeps one capture over its batches: `capture_step`), of naive forward hooks
with the paper's eager distance, and of the paper's protocol (every component on ``e``, outputs to the
host, eager distances), timed in interleaved rounds (medians). ``capture +%``, ``naive +%`` are the
medians over rounds of each round's ratio to the plain forward (a drift of the machine between rounds
cancels); ``noise +%`` is the same figure for a second, identical plain forward against the first:
the smallest overhead the run can tell from zero. ``x naive`` = naive +% / capture +%: what naive
hooks add to the forward over what the capture adds (the whole-step ratio, forward included, is near
1 for both on a big model and says nothing about the hooks); ``x paper`` = paper time / capture time.
The peers are those of ``vitplast profile`` (python/vitplast/profile/profiler.py, peers.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from vitplast_kernels import timing

from .harness import minor_faults, per_round_ratio

# (model, images per batch, dtype): small enough for a 2-core CPU / a short GPU run
CONFIGS = {
    # ViT-Base at batch 8 takes minutes on a 2-core CPU: `vitplast profile` measures it
    "cpu": [("vit_small_patch16_224", 8, torch.float32)],
    "cuda": [("vit_base_patch16_224", 256, torch.bfloat16), ("vit_large_patch16_224", 128, torch.bfloat16)],
}

COLUMNS = [
    ("model", "model", None),
    ("batch", "batch", None),
    ("dtype", "dtype", None),
    ("forward_ms", "forward ms", ".1f"),
    ("capture_ms", "+capture ms", ".1f"),
    ("overhead_pct", "capture +%", ".1f"),
    ("noise_pct", "noise +%", ".1f"),
    ("naive_pct", "naive +%", ".1f"),
    ("faults_forward", "faults/fwd", ".0f"),
    ("faults_capture", "faults/fwd+cap", ".0f"),
    ("reductions_ms", "kernels ms", ".1f"),
    ("added_ms", "added ms", ".1f"),
    ("op_calls_ms", "op calls ms", ".1f"),
    ("bookkeeping_ms", "bookkeeping ms", ".1f"),
    ("modules_ms", "modules ms", ".1f"),
    ("other_ms", "other ms", ".1f"),
    ("setup_ms", "setup ms", ".1f"),
    ("result_ms", "result+host ms", ".1f"),
    ("residual_ms", "residual ms", ".1f"),
    ("naive_ms", "naive hooks ms", ".1f"),
    ("paper_ms", "paper ms", ".1f"),
    ("x_naive_hooks", "x naive", ".2f"),
    ("x_paper", "x paper", ".1f"),
    ("images_per_s", "img/s (+cap)", ".1f"),
]


def added_cost_ratio(peer_pct: float, capture_pct: float) -> float:
    """What a peer adds to the forward over what the capture adds (both in % of the forward); NaN when
    the capture's figure is not above zero (the run cannot tell it from the forward)."""
    return peer_pct / capture_pct if capture_pct > 0 else float("nan")


def capture_step(model: torch.nn.Module, images: torch.Tensor) -> Callable[[], torch.Tensor]:
    """One measurement step as `vitplast profile` times it (`vitplast.profile.profiler.capture_fn`,
    in_situ, halves): a capture built once and kept between steps, attached for each forward, the
    result read on the host."""
    from vitplast.profile import profiler as pf

    return pf.capture_fn(model, images, "in_situ", "halves")


def warm_faults(fn: Callable[[], Any], warmup: int = 20, calls: int = 5) -> float:
    """Median minor page faults per call of ``fn`` called back to back once warm, as a training loop
    calls its steps. A capture step touches 1-3 fresh pages per call for its first ~15 calls (with
    MALLOC_ARENA_MAX=1 or one thread alike, no cyclic garbage, no Python-level growth beyond the
    hooks' handles; measured on the 2-core VM) and none after; the plain forward has none from its
    fourth call. The interleaved rounds' counts (in the JSON) also see the peers' allocations, which
    leave fresh heap pages between our calls."""
    for _ in range(warmup):
        fn()
    counts = []
    for _ in range(calls):
        before = minor_faults()
        fn()
        counts.append(minor_faults() - before)
    return statistics.median(counts)


def _row(model_name: str, batch: int, dtype: torch.dtype, device: torch.device, reps: int) -> dict[str, Any]:
    import timm
    from vitplast.profile import peers
    from vitplast.profile import profiler as pf

    with torch.device(device):
        model = timm.create_model(model_name, pretrained=False)
    model = model.eval().to(device=device, dtype=dtype)
    size = model.pretrained_cfg.get("input_size", (3, 224, 224))[-1]
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 3, size, size, generator=gen).to(device=device, dtype=dtype)
    st = pf.structure(model)
    forward = pf.forward_fn(model, images)
    fns = {"forward": forward, "capture": capture_step(model, images),
           "forward again": forward, "naive": peers.naive_hooks_fn(model, images, st),
           "paper": lambda: peers.paper_protocol(model, images, st)}
    faults: dict[str, list[int]] = {k: [] for k in fns}

    def counted(name, fn):  # minor page faults per call, beside the time (see harness.pin_allocator)
        def run():
            before = minor_faults()
            out = fn()
            faults[name].append(minor_faults() - before)
            return out
        return run

    fns = {k: counted(k, fn) for k, fn in fns.items()}
    samples = timing.interleaved_samples(fns, device=device, rounds=reps)
    t = {k: statistics.median(v) / 1e3 for k, v in samples.items()}

    def paired_pct(name: str) -> float:  # median over rounds of this round's ratio to the forward
        return 100 * (per_round_ratio(samples[name], samples["forward"]) - 1)

    warm = {name: warm_faults(fns[name]) for name in ("forward", "capture")}
    red = pf.reduction_rate(model, images, st, reps=reps)
    parts = {}
    if device.type == "cpu":  # host clocks: the parts of a CPU step (on CUDA they would time launches)
        from .capture_step_parts import step_parts

        found = step_parts(model, images, reps=min(reps, 5))
        parts = {f"{k}_ms": 1e3 * v for k, v in found.items() if k != "faults"}
        parts["step_faults"] = found["faults"]
    return {"model": model_name, "batch": batch, "dtype": str(dtype).removeprefix("torch."),
            "forward_ms": 1e3 * t["forward"], "capture_ms": 1e3 * t["capture"],
            "overhead_pct": paired_pct("capture"), "noise_pct": paired_pct("forward again"),
            "naive_pct": paired_pct("naive"),
            "faults_forward": warm["forward"], "faults_capture": warm["capture"],
            "faults_forward_interleaved": statistics.median(faults["forward"]),
            "faults_capture_interleaved": statistics.median(faults["capture"]), "naive_ms": 1e3 * t["naive"],
            "paper_ms": 1e3 * t["paper"],
            "x_naive_hooks": added_cost_ratio(paired_pct("naive"), paired_pct("capture")),
            "x_paper": t["paper"] / t["capture"], "images_per_s": batch / t["capture"],
            "reductions_ms": 1e3 * red["per_forward_s"], "reductions_GBps": red["GBps"],
            "paper_host_GB": peers.paper_host_bytes(model, images, st) / 1e9, "layers": len(st.layers),
            **parts}


def rows(device: str, quick: bool = False) -> tuple[list[dict[str, Any]], str]:
    dev = torch.device(device)
    configs = CONFIGS[dev.type][:1] if quick else CONFIGS[dev.type]
    reps = 3 if quick else 11 if dev.type == "cpu" else 5
    out = [_row(m, b, dt, dev, reps) for m, b, dt in configs]
    note = (f"timm models, random weights, on {device}; medians of {reps} interleaved rounds; capture = "
            "vitplast_kernels.capture(in_situ, halves) built once, attached for each step, + "
            "pairwise_plasticity + host read; naive = forward hooks with the eager formula; paper = its "
            "protocol (every component on e, outputs to host, eager distances), all blocks; capture +%, naive"
            " +% and noise +% (plain forward timed twice) = medians of per-round ratios to the forward; "
            "faults = minor page faults per call (median of 5 calls back to back after 20 warm-up calls, as "
            "a training loop runs its steps; the interleaved rounds' medians are in the JSON); x naive = "
            "naive +% / capture +% (added cost over added cost); x paper = paper time / capture time; "
            "kernels ms = block 0's distinct tensors reduced alone, times the depth (the kernels' share "
            "of the capture cost); CPU only, the capture step's added time split by clocks inside the step "
            "(bench.capture_step_parts: 5 more interleaved rounds of plain forward and capture step, each "
            "part the median of the rounds' differences): added = the whole step's, op calls = paired-op "
            "calls inside the hooks on the spot (kernels ms: the same reads cache-hot), bookkeeping = the "
            "rest of the hooks, modules = the hooked modules' own forwards (the model's kernels slowed by the"
            " capture), other = the rest of the forward (other model kernels, calling the hooks), setup = the"
            " kept capture attached, result+host = detach, pairwise_plasticity and the host read, residual = "
            "added - the parts (what the medians do not split); the peers are `vitplast profile`'s")
    return out, note
