"""Cost of per-step plasticity monitoring in a finetuning step: ``python -m bench.finetune_overhead``.

Times, interleaved in rounds on the same batch, the training step of ``vitplast finetune`` (forward,
cross-entropy, backward, optimiser step) without monitoring and with it (``halves`` of the training
batch, every component of every block captured in situ, gradient norm per component, loss; the
record built, which synchronises once). Both paths are the driver's own (``step_recorder.StepRecorder``),
for each ``--train`` choice given. Target: monitored / unmonitored <= 1.15 (medians).

Prints one table and, with ``--json PATH``, writes the numbers with the machine and versions.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import torch

from .harness import machine_info, machine_line, print_table, time_interleaved, write_json


def make_step(model, x, y, recorder, opt):
    """One training step as the driver runs it, through ``recorder`` (a `StepRecorder`: every step due,
    or none)."""

    def step():
        with recorder.training_forward():
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float(), y)
        loss.backward()
        if recorder.due:
            recorder.record(0, loss, opt.param_groups[0]["lr"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        recorder.step()

    return step


def bench(model_name: str, img_size: int, batch: int, train: str, device: str, min_time: float,
          min_rounds: int) -> dict:
    from vitplast.finetune.selection import select_trainable
    from vitplast.finetune.step_recorder import StepRecorder
    from vitplast.models.timm_models import create_vit

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = create_vit(model_name, 10, img_size=img_size).to(device).train()
    select_trainable(model, train)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-4, momentum=0.9)
    x = torch.randn(batch, 3, img_size, img_size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    monitored = StepRecorder(model, every=1)  # every step recorded, its hooks attached for both paths
    plain = StepRecorder(model, every=0)  # no step recorded
    t = time_interleaved({"plain": make_step(model, x, y, plain, opt),
                          "monitored": make_step(model, x, y, monitored, opt)},
                         device=device, warmup=1, min_time=min_time, min_rounds=min_rounds)
    return {"model": model_name, "img_size": img_size, "batch": batch, "train": train,
            "plain_ms": 1e3 * t["plain"].median, "monitored_ms": 1e3 * t["monitored"].median,
            "ratio": t["monitored"].median / t["plain"].median, "rounds": t["plain"].reps,
            "plain_q10_q90_ms": [1e3 * t["plain"].q10, 1e3 * t["plain"].q90],
            "monitored_q10_q90_ms": [1e3 * t["monitored"].q10, 1e3 * t["monitored"].q90]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="vit_tiny_patch16_224")
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--train", default="full,MHA", help="comma-separated --train choices to time")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--min-time", type=float, default=15.0, help="seconds per --train choice, at least")
    p.add_argument("--min-rounds", type=int, default=9)
    p.add_argument("--threads", type=int, help="torch.set_num_threads (e.g. 1 on an oversubscribed machine)")
    p.add_argument("--json", help="write the numbers and the machine here")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    info = machine_info(a.device)
    rows = [bench(a.model, a.img_size, a.batch_size, t, a.device, a.min_time, a.min_rounds)
            for t in a.train.split(",")]
    print(machine_line(info))
    title = f"finetuning step, monitored every step vs not ({a.model}, {a.img_size}px, batch {a.batch_size})"
    print_table(title,
                rows, [("train", "train", None), ("plain_ms", "plain ms", ".1f"),
                       ("monitored_ms", "monitored ms", ".1f"), ("ratio", "monitored / plain", ".3f"),
                       ("rounds", "rounds", None)])
    print("target: ratio <= 1.15; medians of interleaved rounds")
    if a.json:
        write_json(a.json, {"machine": info, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
