"""The options of ``vitplast profile``: `ProfileOptions`, composed from the runtime group of
`vitplast.options.groups` (flags, defaults, checks and wording: `vitplast.options.fields`)."""

from __future__ import annotations

import dataclasses

from ..options import parsing
from ..options.fields import OptionError, choice, integer, number, option, optional, settle, thread_count
from ..options.groups import IMG_SIZE, RuntimeOptions
from ..runtime.device import resolve_device

# what a bare `vitplast profile` measures on each device type: (model, images per batch, dtype)
DEVICE_DEFAULTS = {"cuda": ("vit_base_patch16_224", 64, "bfloat16"),
                   "cpu": ("vit_tiny_patch16_224", 8, "float32")}
_GPU, _CPU = DEVICE_DEFAULTS["cuda"], DEVICE_DEFAULTS["cpu"]


@dataclasses.dataclass(frozen=True)
class ProfileOptions(RuntimeOptions):
    """Every option of ``vitplast profile`` (a keyword of `vitplast.profile.profile` each). Once
    checked, ``device`` is the resolved device (``auto`` becomes ``cuda`` or ``cpu``) and ``model``,
    ``batch_size`` and ``dtype`` hold that device type's `DEVICE_DEFAULTS` where they were None."""

    model: str | None = option(
        None, f"timm name (tags, hf-hub:ORG/NAME too) or hf:ID_OR_DIR, with random weights (default: "
        f"{_GPU[0]} on a GPU, {_CPU[0]} on a CPU)")
    batch_size: int | None = option(
        None, f"images per forward pass (even for pairs=halves; default: {_GPU[1]} on a GPU, {_CPU[1]} on a "
        "CPU)", kind=optional(integer(2, what="images per batch must be >= 2 (one pair)")))
    dtype: str | None = option(
        None, f"dtype of the model's weights and inputs, bf16/fp16/fp32 accepted (default: {_GPU[2]} on a "
        f"GPU, {_CPU[2]} on a CPU)", kind=optional(choice(parsing.DTYPES, parsing.DTYPE_ALIASES)))
    protocol: str = option("in_situ", "capture protocol", kind=choice(("in_situ", "decomposition")))
    pairs: str = option("halves", "pairing scheme", kind=choice(("halves", "all")))
    img_size: int | None = option(None, "input resolution (default: the model's)", kind=IMG_SIZE)
    depth: int | None = option(None, "override the number of blocks (a smaller, faster model; default: the "
                               "model's)", kind=optional(integer(1)))
    threads: int | None = option(None, "CPU threads for torch and the kernels (default: torch's)",
                                 kind=optional(thread_count()))
    reps: int = option(3, "timed rounds per variant (medians reported)", kind=integer(1))
    paper: str = option(
        "auto", "run the paper's protocol on every block, estimate it from block 0 times the depth, or skip "
        "it; auto: full when its host memory is under --paper-max-gb",
        kind=choice(("auto", "full", "one-block", "skip")))
    paper_max_gb: float = option(4.0, "host memory (GB) above which --paper auto estimates from one block",
                                 kind=number(positive=True))
    no_layers: bool = option(False, "skip the per-layer / per-component timing", action="store_true")
    out: str = option("results/profile", "folder of profile.json and profile_layers.png, written as one set "
                      "(a new folder, or one a previous profile wrote)", metavar="DIR")
    # the runtime group's progress setting: profile draws no progress bars, so it has no flag
    progress: bool | None = option(None, cli=False)

    def validate(self) -> None:
        """The device resolved and its type's defaults filled in, then what involves several options."""
        device = resolve_device(self.device)
        model, batch, dtype = DEVICE_DEFAULTS["cuda" if device.type == "cuda" else "cpu"]
        settle(self, device=str(device), model=self.model or model, batch_size=self.batch_size or batch,
               dtype=self.dtype or dtype)
        if self.pairs == "halves" and self.batch_size % 2:
            raise OptionError(f"--batch-size {self.batch_size}: must be even for --pairs halves")
