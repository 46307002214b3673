"""``--export``: the finetuned weights of a run as files other tools load.

- ``RUN/model.safetensors``: the plain model's state dict (names as in the timm model), with peft LoRA
  adapters merged into the weights they adapt (`vitplast.models.checkpoints.merge_lora`, the reading
  ``vitplast measure --weights`` does) and peft's copy of the head in place of the original;
- ``RUN/adapter/``: for ``--train lora``, the peft adapter itself (``save_pretrained``), when the peft model
  is at hand (a run that trains now, not one exported later from its checkpoint).

Both are written atomically (a temporary file or directory renamed into place).
"""

from __future__ import annotations

from pathlib import Path

import torch

from vitplast_kernels.atomic_io import atomic_write

from ..models.checkpoints import LORA_ALPHA, merge_lora, strip_prefixes
from ..runs.output_set import OutputSet

MODEL_FILE = "model.safetensors"
ADAPTER_DIR = "adapter"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json", "README.md")


def export_weights(run_path: Path, state: dict[str, torch.Tensor], *, peft_model=None,
                   metadata: dict[str, str] | None = None) -> list[Path]:
    """Writes `MODEL_FILE` (and the adapter of ``peft_model``) into ``run_path``; returns the paths.
    `MODEL_FILE` holds ``state`` (a model's, possibly peft-wrapped) as the plain model's: prefixes removed,
    LoRA merged with scale ``alpha / r``; contiguous CPU tensors that own their memory (what safetensors
    stores)."""
    from safetensors.torch import save_file

    is_peft = peft_model is not None and hasattr(peft_model, "peft_config")
    alpha = peft_model.peft_config["default"].lora_alpha if is_peft else LORA_ALPHA
    merged = merge_lora(strip_prefixes(state), alpha)
    plain = {k: v.detach().to("cpu").contiguous().clone() for k, v in merged.items()}
    path = Path(run_path) / MODEL_FILE
    atomic_write(path, lambda tmp: save_file(plain, tmp, metadata={"format": "pt", **(metadata or {})}))
    written = [path]
    if is_peft:
        out = OutputSet(Path(run_path) / ADAPTER_DIR, ADAPTER_FILES)
        out.check()
        with out.writing() as tmp:
            peft_model.save_pretrained(str(tmp))
        written.append(out.target)
    return written
