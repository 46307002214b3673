"""``vitplast finetune``: the command line of `vitplast.finetune.finetune` (its flags come from
`vitplast.finetune.options.FinetuneOptions`)."""

from __future__ import annotations

from ..options.fields import subcommand
from .grid import finetune
from .options import GROUPS, FinetuneOptions

HELP = """Finetune chosen components of a vision transformer, monitoring their plasticity every few steps.

The paper's component-wise protocol: --train MHA trains attention in every block (plus the head),
--train FC1/FC2/LN1/LN2 likewise; MHA@3, FC1@0-2, MHA@-1 train only those
layers, and + joins parts (MHA@-1+FC1@-1). full, head (linear probing) and lora
(peft LoRA on attention) are the baselines; auto --budget N measures plasticity first and trains
the most plastic components that fit N trainable parameters (auto@layer: the most plastic
(component, layer) units). Components come from the same map vitplast measure uses: the model's
preset, or --component LABEL=GLOB (repeatable), whose labels --train then names. Comma-separated
--train, --lr and --seed values form a grid, run in sequence and aggregated into mean +- std
accuracy per trained component.

Defaults are the embedded example: the digits ViT pretrained on digits 0-4 (--model digits-vit)
finetuned on digits 5-9, each of the five components in turn:

    vitplast finetune --out runs/digits

Each run directory holds config.json, metrics.jsonl (monitor, eval and train records: the training
loss of every step), checkpoint.pt (atomic), summary.json (finished marker), plots/, tb/ with
--tensorboard (every row) and model.safetensors (+ adapter/ for LoRA) with --export.
--resume continues a killed run exactly, with every metrics row once; a finished directory is never
overwritten, and a directory another process is writing is refused (a lock left by a killed run is
taken over). Under torchrun --nproc-per-node N the run is
data-parallel (gloo on CPU, nccl on GPU) and metrics and plasticity are combined over ranks.

A grid's runs train one after another here, --jobs N at a time in processes, or as Ray tasks on a
cluster (--executor ray --ray-address auto: a run whose worker or node dies is retried and resumes
from its checkpoint). --shard I/N trains one slice of the run list (a SLURM array sets it; pass
--resume so a requeued shard continues); the same command without --shard, with --resume or
--analyse-only, then writes grid_summary.json. With Ray or shards, --out must be on storage every
node reaches.
"""


add_arguments, run = subcommand(FinetuneOptions, finetune, GROUPS)
