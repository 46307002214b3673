"""What each criterion costs beside training: time as a multiple of one training pass over the same
images, peak memory as a multiple of one training step's, each criterion against its target.

The **training pass** is full finetuning of the same model over the criterion's images (``--images``
of them in batches of ``--batch-size``): per batch forward, cross-entropy, backward, one SGD step
(momentum 0.9, the finetuning default: its momentum buffer included). Its time is the median of at
least `MIN_PASSES` timed passes after an untimed warm-up pass, made by one long-lived process between
the criteria's rows (a pass before the first criterion, one after each), so that the passes see the
load the criteria saw. Each **criterion** scores every unit on the same images (plasticity pairs each
batch's halves) in a fresh process: its ``seconds`` are `Criterion.score` alone (``Cost.seconds``: the
scoring, model and data already made), with the process's CPU seconds over the same span beside them;
building the model (``build_s``) and making the images (``data_s``) are timed apart and reported.
Ratios: ``x_pass`` = seconds / the training pass's median ("x one training pass over the same
images"; ``x_pass_cpu`` the same with CPU seconds, steadier on a shared machine whose load changes
between rows), ``x_train_step`` = peak / the training step's peak, each checked against `TARGETS` (the
issue's table) and the peak against `LIMIT`.

Peak memory:

- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` once the model and the
  images are on the device (so counted), each row in its own process;
- CPU: each row in its own process; the peak is the resident set's high-water mark (``VmHWM``) minus
  the resident set before the model and the images were made, so that it counts, as on CUDA, the
  model, the images and the work. After the model is built the high-water mark is reset to the current
  resident set (``/proc/self/clear_refs``, Linux 4.0+); where refused, the build's transients are
  included (the table's note says so). The training step's peak is the training process's over its
  warm-up and timed passes (every step alike).

Threads on a shared CPU: OpenMP threads that spin while they wait turn a loaded machine's waits for a
descheduled partner thread into whole time slices per parallel region. Spectral's float64 SVDs (48
matrices, LAPACK's many small parallel regions) took 6-10 s each with 2 spinning threads at a load
average of 10 on the 2-core VM, 0.2-0.5 s with ``OMP_WAIT_POLICY=PASSIVE`` or one thread: that is
where the 2026-12-03 rows' extra minutes of spectral and CKA went (each timed ``Criterion.score``
alone, as now, but under load). Every process here therefore gets ``OMP_WAIT_POLICY=PASSIVE`` unless
the environment sets it (``--omp-wait-policy``), and ``--threads`` sets the torch threads of every
process.

``rows(...)`` -> list of dicts; ``python -m bench.criteria [--device cpu|cuda] [--model NAME]
[--images N] [--batch-size B] [--img-size S] [--criteria a,b] [--threads T] [--json PATH]`` prints the
table and the machine line. Not run in CI (a smoke test runs ``rows`` on a tiny model).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from .harness import load_warning, machine_info, machine_line, print_table, write_json

TIME_HEAD = "x one training pass over the same images"
COLUMNS = [
    ("criterion", "criterion", None),
    ("seconds", "seconds", ".2f"),
    ("cpu_s", "CPU s", ".1f"),
    ("x_pass", TIME_HEAD, ".2f"),
    ("x_pass_cpu", "same, CPU s", ".2f"),
    ("forwards", "fwd", None),
    ("backwards", "bwd", None),
    ("peak_mib", "peak MiB", ".0f"),
    ("x_train_step", "x train step's peak", ".2f"),
    ("target", "targets (time, peak)", None),
    ("build_s", "model build s", ".1f"),
    ("data_s", "data s", ".2f"),
]
TRAIN_STEP = "training pass (SGD, full)"
LIMIT = 2.0  # any criterion's peak memory over the training step's (``verdict``)
# the targets per criterion: (time over a training pass, peak over a training step's)
TARGETS = {"fisher": (2.0, 2.0), "rgn": (1.5, 1.5), "cka": (1.0, 1.0), "plasticity": (1.0, 0.5),
           "spectral": (0.25, 0.25)}
MIN_PASSES = 3
RESULT_MARK = "criteria-bench-row: "  # the line a row's process prints its result on
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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_pass(model: torch.nn.Module, data: list) -> tuple[float, float]:
    """Full finetuning over ``data``: per batch one SGD step (momentum 0.9); its seconds and the
    process's CPU seconds."""
    dev = data[0].images.device
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    model.train()
    _sync(dev)
    t0, cpu = time.perf_counter(), time.process_time()
    for b in data:
        loss = torch.nn.functional.cross_entropy(model(b.images), b.labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _sync(dev)
    return time.perf_counter() - t0, time.process_time() - cpu


def score_criterion(name: str, model: torch.nn.Module, data: list, device: torch.device) -> dict:
    """Every unit scored by criterion ``name`` on ``data``: its `Cost` (seconds of `Criterion.score`
    alone) and the process's CPU seconds over the call."""
    from vitplast.criteria import Setting, get_criterion

    model.eval()
    setting = Setting(lambda seed: model, seeds=(0,), batches=data,
                      pair_batches=lambda: [b.images for b in data], device=device)
    crit = get_criterion(name)
    cpu = time.process_time()
    cost = crit.score(setting).cost
    return {"criterion": name, "seconds": cost.seconds, "cpu_s": time.process_time() - cpu,
            "forwards": cost.forwards, "backwards": cost.backwards}


def _import_what_rows_use() -> None:
    """The modules the criteria import when they first run, imported before the high-water mark is
    reset: loading code is not the work's memory."""
    import importlib

    for module in ("timm", "vitplast.criteria", "torch.func", "torch.nn.attention", "tqdm.auto",
                   "vitplast_kernels.measure.targets", "vitplast.criteria.result"):
        importlib.import_module(module)


class _Setup:
    """The images and the model of a row, each timed, and the peak memory measured from then on."""

    def __init__(self, device: str, model_name: str, images: int, batch_size: int, img_size: int,
                 model_kwargs: dict) -> None:
        self.dev = torch.device(device)
        _import_what_rows_use()
        gc.collect()
        self.before_kib = _status_kib("VmRSS")
        t0 = time.perf_counter()
        self.data = _batches(self.dev, images, batch_size, img_size)
        _sync(self.dev)
        self.data_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.model = _model(model_name, self.dev, img_size, model_kwargs)
        _sync(self.dev)
        self.build_s = time.perf_counter() - t0
        gc.collect()
        self.reset = True
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)
        else:
            self.reset = _reset_high_water()

    def peak_bytes(self) -> int | None:
        if self.dev.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.dev))
        return None if self.before_kib is None else (_high_water_kib() - self.before_kib) * 1024

    def report(self) -> dict:
        return {"peak_bytes": self.peak_bytes(), "reset": self.reset, "build_s": self.build_s,
                "data_s": self.data_s}


def measure_one(what: str, device: str, model_name: str, images: int, batch_size: int, img_size: int,
                model_kwargs: dict) -> dict:
    """The row of criterion ``what`` measured in this process (see the module docstring)."""
    setup = _Setup(device, model_name, images, batch_size, img_size, model_kwargs)
    row = score_criterion(what, setup.model, setup.data, setup.dev)
    return {**row, **setup.report()}


def train_worker(device: str, model_name: str, images: int, batch_size: int, img_size: int,
                 model_kwargs: dict, commands=None, emit=None) -> None:
    """The training process: builds the model, makes an untimed warm-up pass, then answers each
    command (``pass``: one timed pass, its seconds; ``done``: the step's peak and the build's times)."""
    emit = emit or (lambda obj: print(RESULT_MARK + json.dumps(obj), flush=True))
    setup = _Setup(device, model_name, images, batch_size, img_size, model_kwargs)
    warm, _ = training_pass(setup.model, setup.data)
    emit({"ready": True, "warmup_s": warm})
    for line in commands if commands is not None else sys.stdin:
        cmd = line.strip()
        if cmd == "pass":
            seconds, cpu = training_pass(setup.model, setup.data)
            emit({"seconds": seconds, "cpu_s": cpu})
        elif cmd == "done":
            emit({"warmup_s": warm, **setup.report()})
            return


def _argv(what: str, device: str, model_name: str, images: int, batch_size: int, img_size: int,
          model_kwargs: dict, threads: int | None) -> list[str]:
    return [sys.executable, "-m", "bench.criteria", what[0], what[1], "--device", device, "--model",
            model_name, "--images", str(images), "--batch-size", str(batch_size), "--img-size",
            str(img_size), "--model-kwargs", json.dumps(model_kwargs)] + (
                ["--threads", str(threads)] if threads else [])


def _child_env(omp_wait_policy: str | None) -> dict:
    env = dict(os.environ)
    if omp_wait_policy and "OMP_WAIT_POLICY" not in env:
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    return env


def _read_result(proc: subprocess.Popen, what: str) -> dict:
    for line in proc.stdout:
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    err = proc.stderr.read() if proc.stderr else ""
    raise RuntimeError(f"bench.criteria {what}: ended with status {proc.wait()} without a result:\n"
                       f"{err[-4000:]}")


def _one_in_fresh_process(what: str, args: tuple, threads: int | None, env: dict) -> dict:
    """`measure_one` in a new Python process (``python -m bench.criteria --one WHAT ...``)."""
    done = subprocess.run(_argv(("--one", what), *args, threads), cwd=ROOT, capture_output=True, text=True,
                          check=False, env=env)
    found = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARK)]
    if done.returncode != 0 or not found:
        raise RuntimeError(f"bench.criteria --one {what} ended with status {done.returncode}:\n"
                           f"{done.stderr[-4000:]}")
    return json.loads(found[-1][len(RESULT_MARK):])


class _TrainProcess:
    """`train_worker` in a new Python process, asked for one timed pass at a time."""

    def __init__(self, args: tuple, threads: int | None, env: dict) -> None:
        self.proc = subprocess.Popen(_argv(("--train-worker", "1"), *args, threads), cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.ready = _read_result(self.proc, "training process")

    def ask(self, cmd: str) -> dict:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return _read_result(self.proc, "training process")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def rows(device: str = "cpu", model_name: str = "vit_base_patch16_224", images: int = 64,
         batch_size: int = 32, criteria: list[str] | None = None, img_size: int = 224,
         fresh_process: bool = True, threads: int | None = None, omp_wait_policy: str | None = "PASSIVE",
         **model_kwargs) -> list[dict]:
    """The training pass's row, then one per criterion: ``seconds`` (the training pass: the median of
    its timed passes, listed in ``passes``), ``cpu_s``, passes, ``build_s``, ``data_s``, ``peak_mib``,
    ``x_pass`` (seconds over the training pass's), ``x_train_step`` (the peak over the training
    step's), ``verdict`` (``ok`` within `LIMIT` times the step's peak, else ``OVER``) and ``target``
    (`TARGETS`: ``ok`` or which of time and peak is over; None without a target); ``reset`` False on a
    row whose CPU high-water mark could not be reset after building the model.
    ``fresh_process=False`` measures every row in this process, the training passes first (a quick
    test: the rows then share one heap, and a row's peak may be hidden by memory an earlier row left)."""
    from vitplast.criteria import CRITERIA

    names = list(criteria or CRITERIA)
    train_batches = range(0, images, batch_size)
    args = (device, model_name, images, batch_size, img_size, model_kwargs)
    passes, out = [], []
    if fresh_process:
        env = _child_env(omp_wait_policy)
        trainer = _TrainProcess(args, threads, env)
        try:
            passes.append(trainer.ask("pass"))
            for what in names:
                out.append(_one_in_fresh_process(what, args, threads, env))
                passes.append(trainer.ask("pass"))
            while len(passes) < MIN_PASSES:
                passes.append(trainer.ask("pass"))
            train = trainer.ask("done")
        finally:
            trainer.close()
    else:
        if threads:
            torch.set_num_threads(threads)
        got = []
        commands = ["pass"] * MIN_PASSES + ["done"]
        train_worker(*args, commands=commands, emit=got.append)
        passes = got[1:-1]
        train = got[-1]
        out = [measure_one(what, *args) for what in names]
    median = statistics.median(p["seconds"] for p in passes)
    median_cpu = statistics.median(p["cpu_s"] for p in passes)
    # forwards and backwards: one per batch, as in finetuning
    first = {"criterion": TRAIN_STEP, "seconds": median, "cpu_s": median_cpu, "forwards": len(train_batches),
             "backwards": len(train_batches), "passes": [p["seconds"] for p in passes],
             "passes_cpu_s": [p["cpu_s"] for p in passes], **train}
    out = [first] + out
    step_peak = first["peak_bytes"]
    for row in out:
        peak = row.pop("peak_bytes")
        row["peak_mib"] = None if peak is None else peak / 2**20
        ratio = None if peak is None or not step_peak else peak / step_peak
        row["x_train_step"] = ratio
        row["x_pass"] = row["seconds"] / median if median else None
        row["x_pass_cpu"] = row["cpu_s"] / median_cpu if median_cpu else None
        row["verdict"] = None if ratio is None else "ok" if ratio <= LIMIT else "OVER"
        row["target"] = _target(row)
    return out


def _target(row: dict) -> str | None:
    """``ok (<= t, <= m)`` when within the criterion's `TARGETS`, else which is over; None without one."""
    if row["criterion"] not in TARGETS:
        return None
    t, m = TARGETS[row["criterion"]]
    over = [w for w, v, lim in (("time", row["x_pass"], t), ("peak", row["x_train_step"], m))
            if v is not None and v > lim]
    return ("OVER " + "+".join(over) if over else "ok") + f" (<={t:g}, <={m:g})"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--criteria", default=None, help="comma-separated (default: every criterion)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of every process (default: torch's)")
    p.add_argument("--omp-wait-policy", default="PASSIVE",
                   help="OMP_WAIT_POLICY of the processes, unless the environment sets it ('' : none)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows and the machine here")
    p.add_argument("--model-kwargs", default="{}", help=argparse.SUPPRESS)  # JSON, for --one
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # measure this row alone, print it
    p.add_argument("--train-worker", default=None, help=argparse.SUPPRESS)  # the training process
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    kwargs = json.loads(args.model_kwargs)
    if args.threads:
        torch.set_num_threads(args.threads)
    common = (args.device, args.model, args.images, args.batch_size, args.img_size, kwargs)
    if args.one is not None:
        print(RESULT_MARK + json.dumps(measure_one(args.one, *common)), flush=True)
        return 0
    if args.train_worker is not None:
        train_worker(*common)
        return 0
    crit = [c.strip() for c in args.criteria.split(",")] if args.criteria else None
    info = machine_info(args.device)
    if args.threads:
        info["torch_threads"] = args.threads
    policy = os.environ.get("OMP_WAIT_POLICY", args.omp_wait_policy or None)
    info["omp_wait_policy"] = policy
    start = time.perf_counter()
    out = rows(args.device, args.model, args.images, args.batch_size, crit, args.img_size,
               threads=args.threads, omp_wait_policy=args.omp_wait_policy or None, **kwargs)
    how = ("CUDA max_memory_allocated" if torch.device(args.device).type == "cuda" else
           "CPU resident set of a fresh process per row: high-water mark minus the resident set before the "
           "model and images")
    command = "python -m bench.criteria " + " ".join(sys.argv[1:] if argv is None else argv)
    passes = out[0]["passes"]
    note = [machine_line(info), f"command: {command.strip()}; OMP_WAIT_POLICY={policy}",
            f"time: {TIME_HEAD} ({len(passes)} timed passes after a warm-up, interleaved with the criteria's "
            f"rows: {', '.join(f'{p:.2f}' for p in passes)} s; median {out[0]['seconds']:.2f} s); seconds: "
            "Criterion.score alone (model build and data timed apart)",
            f"peak: {how}; targets: the issue's (time, peak) bounds; any peak <= {LIMIT:g}x the step's: "
            + ("all" if all(r["verdict"] == "ok" for r in out) else "NOT all"),
            f"whole run: {time.perf_counter() - start:.0f} s"]
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
