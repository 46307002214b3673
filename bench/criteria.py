"""What each criterion costs: time and peak memory on ViT-B/16 (random init, 64 images), beside one
training step, with the ratio of the peaks and a verdict (target: no criterion above 2x the step's).

The training step is full finetuning of the same model on one batch of ``--batch-size`` images (the
criterion's batch): forward, cross-entropy, backward, one SGD step (momentum 0.9, the finetuning
default: its momentum buffer included). Each criterion scores every unit on the same images
(``--images`` of them, in batches of ``--batch-size``; plasticity pairs each batch's halves).

Peak memory:

- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` (the model and the
  images on the device included), every row in this process;
- CPU: every row is measured in a fresh process (``--one NAME``), so that no row inherits the heap
  another row grew. The peak is the process's resident set: ``VmHWM`` (the high-water mark of the
  resident set, ``getrusage``'s ``ru_maxrss``) minus the resident set before the model and the images
  were made, so that it counts, as on CUDA, the model, the images and the work. After the model is
  built the high-water mark is reset to the current resident set (``/proc/self/clear_refs``, Linux
  4.0+), so the transients of building the model are not counted; where that reset is refused the
  build's transients are included (the table's note says so). The resident set, rather than torch's
  CPU profiler (``profile_memory=True``): it is what the machine must hold (allocator slack and
  buffers outside torch's tensors included), and it costs nothing while the profiler records an event
  per operator, which fisher's per-sample gradients issue by the thousand (slower, and the records are
  themselves memory).

``rows(...)`` -> list of dicts; ``python -m bench.criteria [--device cpu|cuda] [--model NAME]
[--images N] [--batch-size B] [--img-size S] [--criteria a,b] [--json PATH]`` prints the table and
the machine line. Not run in CI (a smoke test runs ``rows`` on a tiny model).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from .harness import load_warning, machine_info, machine_line, print_table, write_json

COLUMNS = [
    ("criterion", "criterion", None),
    ("seconds", "seconds", ".2f"),
    ("forwards", "forwards", None),
    ("backwards", "backwards", None),
    ("peak_mib", "peak MiB", ".0f"),
    ("x_train_step", "x train step", ".2f"),
    ("verdict", "<= 2x", None),
]
TRAIN_STEP = "train step (SGD, full)"
LIMIT = 2.0  # a criterion's peak memory over the training step's
RESULT_MARK = "criteria-bench-row: "  # the line a --one process prints its row on
ROOT = Path(__file__).resolve().parent.parent


def _model(name: str, device: torch.device, img_size: int, model_kwargs: dict) -> torch.nn.Module:
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, num_classes=10, img_size=img_size,
                             **model_kwargs).to(device)


def _batches(device: torch.device, images: int, batch_size: int, img_size: int) -> list:
    """``images`` random labelled images in batches of ``batch_size`` (the last one smaller)."""
    from vitplast.criteria import Batch

    g = torch.Generator().manual_seed(0)
    sizes = [min(batch_size, images - k) for k in range(0, images, batch_size)]
    return [Batch(torch.randn(n, 3, img_size, img_size, generator=g).to(device),
                  torch.randint(0, 10, (n,), generator=g).to(device)) for n in sizes]


def _status_kib(field: str) -> int | None:
    """``VmRSS`` or ``VmHWM`` of this process in KiB (None where /proc is not there)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_high_water() -> bool:
    """Resets this process's resident-set high-water mark to its current resident set (Linux 4.0+:
    ``echo 5 > /proc/self/clear_refs``); False where that is refused."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _high_water_kib() -> int:
    """The resident-set high-water mark in KiB (``VmHWM``; ``ru_maxrss`` where /proc is not there)."""
    hwm = _status_kib("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def train_step(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> dict:
    """One full-finetuning SGD step (momentum 0.9) on ``images``: seconds and passes."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    model.train()
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if images.device.type == "cuda":
        torch.cuda.synchronize()
    return {"criterion": TRAIN_STEP, "seconds": time.perf_counter() - t0, "forwards": 1, "backwards": 1}


def score_criterion(name: str, model: torch.nn.Module, data: list, device: torch.device) -> dict:
    """Every unit scored by criterion ``name`` on ``data``: seconds and passes (its `Cost`)."""
    from vitplast.criteria import Setting, get_criterion

    model.eval()
    setting = Setting(lambda seed: model, seeds=(0,), batches=data,
                      pair_batches=lambda: [b.images for b in data], device=device)
    cost = get_criterion(name).score(setting).cost
    return {"criterion": name, "seconds": cost.seconds, "forwards": cost.forwards,
            "backwards": cost.backwards}


def _import_what_rows_use() -> None:
    """The modules the criteria import when they first run, imported before the high-water mark is
    reset: loading code is not the work's memory."""
    import importlib

    for module in ("timm", "vitplast.criteria", "torch.func", "torch.nn.attention", "tqdm.auto",
                   "vitplast_kernels.measure.targets", "vitplast.criteria.result"):
        importlib.import_module(module)


def measure_one(what: str, device: str, model_name: str, images: int, batch_size: int, img_size: int,
                model_kwargs: dict) -> dict:
    """The row of ``what`` (`TRAIN_STEP` or a criterion's name) measured in this process: its seconds,
    passes and ``peak_bytes`` (see the module docstring; ``reset``: whether the CPU high-water mark
    could be reset after the model was built)."""
    dev = torch.device(device)
    _import_what_rows_use()
    gc.collect()
    before_kib = _status_kib("VmRSS")
    data = _batches(dev, images, batch_size, img_size)
    model = _model(model_name, dev, img_size, model_kwargs)
    gc.collect()
    reset = True
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        reset = _reset_high_water()
    if what == TRAIN_STEP:
        row = train_step(model, data[0].images, data[0].labels)
    else:
        row = score_criterion(what, model, data, dev)
    if dev.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated())
    else:
        peak = None if before_kib is None else (_high_water_kib() - before_kib) * 1024
    return {**row, "peak_bytes": peak, "reset": reset}


def _one_in_fresh_process(what: str, device: str, model_name: str, images: int, batch_size: int,
                          img_size: int, model_kwargs: dict) -> dict:
    """`measure_one` in a new Python process (``python -m bench.criteria --one WHAT ...``)."""
    argv = [sys.executable, "-m", "bench.criteria", "--one", what, "--device", device, "--model", model_name,
            "--images", str(images), "--batch-size", str(batch_size), "--img-size", str(img_size),
            "--model-kwargs", json.dumps(model_kwargs)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    found = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARK)]
    if done.returncode != 0 or not found:
        raise RuntimeError(f"bench.criteria --one {what} ended with status {done.returncode}:\n"
                           f"{done.stderr[-4000:]}")
    return json.loads(found[-1][len(RESULT_MARK):])


def rows(device: str = "cpu", model_name: str = "vit_base_patch16_224", images: int = 64,
         batch_size: int = 32, criteria: list[str] | None = None, img_size: int = 224,
         fresh_process: bool = True, **model_kwargs) -> list[dict]:
    """The training step's row, then one per criterion: seconds, passes, ``peak_mib``, ``x_train_step``
    (the peak over the step's) and ``verdict`` (``ok`` within `LIMIT` times, else ``OVER``); ``reset``
    False on a row whose CPU high-water mark could not be reset after building the model.
    ``fresh_process=False`` measures the CPU rows in this process (a quick test: the rows then share
    one heap, and a row's peak may be hidden by memory an earlier row left with the process)."""
    from vitplast.criteria import CRITERIA

    names = [TRAIN_STEP] + list(criteria or CRITERIA)
    out = []
    for what in names:
        args = (what, device, model_name, images, batch_size, img_size, model_kwargs)
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
        fresh = fresh_process and torch.device(device).type == "cpu"
        row = _one_in_fresh_process(*args) if fresh else measure_one(*args)
        out.append(row)
    step_peak = out[0]["peak_bytes"]
    for row in out:
        peak = row.pop("peak_bytes")
        row["peak_mib"] = None if peak is None else peak / 2**20
        ratio = None if peak is None or not step_peak else peak / step_peak
        row["x_train_step"] = ratio
        row["verdict"] = None if ratio is None else "ok" if ratio <= LIMIT else "OVER"
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--criteria", default=None, help="comma-separated (default: every criterion)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows and the machine here")
    p.add_argument("--model-kwargs", default="{}", help=argparse.SUPPRESS)  # JSON, for --one
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # measure this row alone, print it
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    kwargs = json.loads(args.model_kwargs)
    if args.one is not None:
        row = measure_one(args.one, args.device, args.model, args.images, args.batch_size, args.img_size,
                          kwargs)
        print(RESULT_MARK + json.dumps(row), flush=True)
        return 0
    crit = [c.strip() for c in args.criteria.split(",")] if args.criteria else None
    info = machine_info(args.device)
    out = rows(args.device, args.model, args.images, args.batch_size, crit, args.img_size, **kwargs)
    how = ("CUDA max_memory_allocated" if torch.device(args.device).type == "cuda" else
           "CPU resident set of a fresh process per row: high-water mark minus the resident set before the "
           "model and images")
    command = "python -m bench.criteria " + " ".join(sys.argv[1:] if argv is None else argv)
    note = [machine_line(info), f"command: {command.strip()}",
            f"peak: {how}; verdict: peak <= {LIMIT:g}x the training step's"]
    if not all([r.pop("reset") for r in out]):
        note.append("note: the high-water mark could not be reset after building the model: peaks include "
                    "its transients")
    if (warning := load_warning(info)) is not None:
        note.append(warning)
    print_table(f"criteria on {args.model} (random init, img {args.img_size}), {args.images} images, batch "
                f"{args.batch_size}, on {args.device}", out, COLUMNS, note="\n".join(note))
    if args.json:
        write_json(args.json, {"machine": info, "command": command.strip(), "rows": out})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
