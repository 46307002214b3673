"""``vitplast claim``: the command line of `vitplast.claim.claim` (its flags come from
`vitplast.claim.options.ClaimOptions`)."""

from __future__ import annotations

from ..options.fields import subcommand
from .experiment import claim
from .options import GROUPS, ClaimOptions

HELP = """Does plasticity predict which component to finetune? The paper's claim, tested in one command.

For a model, a pretraining-side dataset X and a downstream dataset Y:

1. measure every component's plasticity *before* finetuning on matched X-Y pairs (--protocol
   in_situ or decomposition), in chunks that the bootstrap resamples;
2. finetune each component alone (plus the head) on Y under one budget: the same steps, batch,
   optimiser, learning-rate grid and seeds for every component, through `vitplast finetune`'s driver
   (one run directory per run under OUT/runs/), and the head alone as the baseline;
3. report per component: plasticity with its CI, trainable parameters, accuracy and gain over the
   baseline with CIs across seeds, then Spearman's rho and Kendall's tau-b between plasticity and gain
   with a bootstrap CI (seeds and pairs resampled) and exact permutation p-values.

Per layer the claim is plasticity-only: the finetune driver trains a component in every block, so
gains exist per component type; plasticity is reported per layer too (--granularity layer trains each
(component, layer) alone instead).

--criteria (default: all) are scored on the model the runs start from and correlated with the gains as
plasticity is. --budgets K,K puts them to the practical test: at each budget (components; parameters
besides the head with --granularity layer) each criterion's top set and the attention rule (MHA in
every layer) are finetuned and their relative gain placed among every random set of that budget (at
most 50, else --draws of them), full finetuning as the reference (OUT/budgets.png, criteria.json).
Cost: the default --budgets 1 adds only full finetuning's 9 runs; --budgets 1,2 adds the C(5,2) = 10
pairs, 90 runs beside the default's 63. The sets that depend on no score are planned (and sharded)
with the claim's runs; a criterion's set outside the random ones is trained after scoring by the run
without --shard.

--components also takes the baselines full, lora and head: trained and reported beside
the components (accuracy, gain), not ranked; with lora, LoRA is also a row at equal budget (the rank
nearest the budget's parameters). Each optimiser of --optimizer (default: sgd,adamw) and each
downstream dataset (--data repeated, or --datasets A,B) is an arm of one experiment: each arm analysed
as above (OUT/datasets/NAME/; one arm: OUT itself), then together (OUT/aggregate.*): the rank
correlation per arm, a stratified permutation test of the pooled within-arm Spearman (a dataset's
units permuted once for all of its arms), the per-arm p-values combined (Stouffer), and a figure with
one panel per arm.

Defaults: the embedded digits ViT (pretrained here on digits 0-4), X = digits 0-4, Y = digits 5-9.
A killed claim continues where it stopped when run again with the same options (finished runs are
loaded, partial ones resume from their last checkpoint); an existing run trained with other options is
named before anything is trained (the dry run too). Writes OUT/claim.json, claim.txt, claim.png,
budgets.png, criteria.json.

Where the runs train: --jobs N processes on this machine; --executor ray one Ray task per run on
a Ray cluster (--ray-address auto after ray start; a run whose worker or node dies is retried
elsewhere and resumes from its checkpoint); --shard I/N one slice of the run list (a SLURM array
sets it), then a final run without --shard (or --analyse-only) writes the analysis. With Ray or
shards, OUT must be on storage every node reaches; this process alone writes the reports. A run
directory another process is writing is waited for, not trained twice.

examples:
  vitplast claim --out runs/claim
  vitplast claim --out runs/claim --dry-run           # how many runs, how long on this machine
  vitplast claim --out runs/claim --budgets 1,2       # each criterion's pair of components vs all 10
  vitplast claim --model vit_small_patch16_224 --weights vit_s.safetensors --img-size 224 \\
      --pretrain-data in1k_val/ --data flowers/ --data pets/ --components MHA,FC1,FC2,LN1,LN2,full,lora \\
      --device cuda --amp bf16 --batch-size 128 --steps 500 --lr 1e-4,3e-4,1e-3 --seed 0,1,2 \\
      --executor ray --ray-address auto --out /shared/runs/claim_paper
  vitplast claim --out /shared/claim --shard $((SLURM_ARRAY_TASK_ID + 1))/$SLURM_ARRAY_TASK_COUNT
  vitplast claim --out /shared/claim --analyse-only   # after every shard
"""


add_arguments, run = subcommand(ClaimOptions, claim, GROUPS, defaults_in_help=False)
