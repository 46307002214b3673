"""``vitplast measure`` on the command line: `HELP`, `add_arguments`, `run`; the work is
``vitplast.measure(...)`` (`vitplast.measure.measure_scores`), which prints as it goes."""

from __future__ import annotations

from ..options.fields import subcommand
from ..options.groups import GROUP_TITLES
from .options import MeasureOptions
from .run import measure_scores

__all__ = ["HELP", "add_arguments", "run"]

HELP = """\
Measure the plasticity of every component (LN1, MHA, LN2, FC1, FC2) of every block of a model.

With no arguments: the embedded default, a small timm ViT pretrained on scikit-learn's digits 0-4 and
shipped with the package (the same weights on every machine), measured with matched pairs X = digits 0-4
(pretraining classes) and Y = digits 5-9 (unseen classes): the paper's pretraining-vs-downstream pairing
in miniature. Otherwise: a timm model by name with its published weights (--model NAME[.TAG]
--pretrained, or hf-hub:ORG/NAME; from the Hugging Face hub or its local cache, HF_HUB_OFFLINE honoured),
a transformers image model (--model hf:ID_OR_DIR), or any architecture with local weights (--weights), on
an ImageFolder (--data), each image prepared as the model's own config says (mean, std, interpolation,
crop; --mean/--std or --no-model-transform override it). A model with no weights to load is refused
unless --random-init says so. Pairs are drawn within one batch (--pairs halves: image i with i + B/2) or
across two datasets (--pair-data: X from --data, Y from --pair-data; each batch is half X, half Y, X[i]
paired with Y[i]). Models without a preset (Swin, ResNets, ...) are measured by naming their components
with --component. run.json records the versions, the weights' sha256 or hub revision, the data and the
transform.

rate(x, y) = ||f(x) - f(y)||_F / ||x - y||_F per pair; plasticity = mean rate (per component and layer).
The table prints mean ± 95% CI half-width per layer; "pairs used" sums the pairs over layers.

Other criteria score the same units (higher = finetune first): --criterion rgn,fisher,cka,spectral,size
(comma-separated, plasticity included or not) writes NAME.json, .csv, .txt and two figures beside run.json;
a rerun into the same --out reuses every score whose model, data and options are unchanged.

examples:
  vitplast measure
  vitplast measure --model vit_base_patch16_224.augreg_in21k --pretrained --data imgs/ --out res/
  vitplast measure --model hf:google/vit-base-patch16-224 --data imgs/ --out res/
  vitplast measure --model vit_small_patch16_224 --weights vit_s.safetensors --data imgs/ --out res/
  vitplast measure --model vit_base_patch16_224 --weights w.npz --data in1k_val/ --pair-data cars/ \\
      --protocol decomposition --device cuda --amp bf16
  vitplast measure --weights runs/c10/MHA-lr0.001-s0           # a vitplast finetune run directory
  vitplast measure --criterion plasticity,rgn,spectral,size --out res/
  vitplast measure --model swin_tiny_patch4_window7_224.ms_in1k --pretrained --data imgs/ \\
      --component 'LN1=layers.*.blocks.*.norm1' --component 'MHA=layers.*.blocks.*.attn' \\
      --component 'LN2=layers.*.blocks.*.norm2' --component 'FC1=layers.*.blocks.*.mlp.fc1' \\
      --component 'FC2=layers.*.blocks.*.mlp.fc2'
"""


add_arguments, run = subcommand(MeasureOptions, measure_scores, GROUP_TITLES)
