"""``vitplast profile`` on the command line: `HELP`, `add_arguments`, `run`; the work is
`vitplast.profile.profile`."""

from __future__ import annotations

from ..options.fields import subcommand
from ..options.groups import GROUP_TITLES
from .options import ProfileOptions
from .run import profile

__all__ = ["HELP", "add_arguments", "run"]

HELP = """\
Time and size a plasticity measurement on a (large) timm model.

Prints, and writes as JSON (--out DIR/profile.json) with a plot of time per layer
(DIR/profile_layers.png):

- images/s of the plain forward, of forward + capture (a whole measurement step: hooks, reductions,
  result read on the host), of naive hooks with the paper's eager distance, and of the paper's protocol
  (outputs of every component on the host, then eager distances; on large models estimated from one
  block times the depth, and flagged as such);
- time per layer and per component, without and with capture;
- achieved GB/s of the reductions on block 0's tensors;
- peak memory of each (GPU: torch.cuda.max_memory_allocated; CPU: peak RSS deltas);
- host memory the paper's protocol would need for the batch.

--model takes the names the other commands take: a timm name (with a pretrained tag, hf-hub:ORG/NAME,
local-dir:DIR) or hf:ID_OR_DIR for a transformers image model. Random weights are always used, without
--random-init (timing does not depend on the weights, so profile never loads them); --dtype is the
dtype of the model's weights and inputs, --amp an autocast around the timed forwards. The defaults
finish in under a minute: on a GPU ViT-Base/16, 64 images in bfloat16; on a CPU ViT-Tiny/16, 8 images
in float32. Example (the ViT-Huge configuration of bench/gpu_check.sh):

    vitplast profile --model vit_huge_patch14_224 --device cuda --batch-size 256 --dtype bfloat16
"""


add_arguments, run = subcommand(ProfileOptions, profile, GROUP_TITLES)
