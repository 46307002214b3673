"""The options of ``vitplast measure``: `MeasureOptions`, composed from the model, data and runtime groups of
`vitplast.options.groups` (flags, defaults, checks and wording: `vitplast.options.fields`)."""

from __future__ import annotations

import dataclasses

from ..criteria.registry import CRITERIA
from ..models.builder import DIGITS_MODEL
from ..options import parsing
from ..options.fields import Kind, OptionError, choice, csv, integer, option, optional, settle
from ..options.groups import IMG_SIZE, DataOptions, ModelOptions, RuntimeOptions
from ..runtime.precision import AMP_ALIASES, AMP_CHOICES

PROTOCOLS = ("in_situ", "decomposition")
PAIRS = ("halves", "all")
DEFAULT_DATA = "digits:0-4"
DEFAULT_PAIR_DATA = "digits:5-9"
MAX_BATCH = 2**16  # images in one forward pass (--batch-size)


def _json_object(value):
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object {{\"key\": value, ...}}, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class MeasureOptions(RuntimeOptions, DataOptions, ModelOptions):  # fields: the model group first
    """Every option of ``vitplast measure`` (a keyword of `vitplast.measure.measure` each)."""

    # the model group, with measure's defaults and wording
    model: str | None = option(
        None, "timm name (with a pretrained tag, or hf-hub:ORG/NAME), hf:ID_OR_DIR (a transformers image "
        f"model), or {DIGITS_MODEL!r}; default: the model of --weights (a finetune run directory, a model "
        f"folder), else {DIGITS_MODEL} (the embedded ViT pretrained here on digits 0-4)", group="model")
    weights: str | None = option(
        None, "local checkpoint (.safetensors, .pth, .bin, .npz; a Lightning .ckpt, a timm training "
        "checkpoint), a vitplast finetune run directory, or a model folder (a hub snapshot, a "
        "save_pretrained directory)", metavar="PATH", group="model")
    img_size: int | None = option(None, "image size (default: the model's own; 32 for the digits ViT)",
                                  group="model", kind=IMG_SIZE)
    amp: str = option("none", "autocast precision of the forward passes (default: %(default)s)",
                      group="runtime", kind=choice(AMP_CHOICES, AMP_ALIASES))
    allow_partial_weights: bool = option(
        False, "load a checkpoint that leaves more than the classifier head at random init, or holds tensors "
        "the model does not have (by default an error)", action="store_true", group="model")
    data: str | None = option(
        None, "ImageFolder DIR, or a spec of load_dataset ('digits:0-4', 'cifar10:DIR', ...); default "
        f"{DEFAULT_DATA!r} with --pair-data {DEFAULT_PAIR_DATA!r}", metavar="SPEC", group="data")
    # measuring never augments, nor holds training images out
    augment: bool = option(False, cli=False)
    holdout: float = option(0.0, cli=False)
    pair_data: str | None = option(
        None, "matched cross-domain pairs: X from --data, Y from here (same spec forms as --data)",
        metavar="SPEC", group="data")
    skip_bad_images: bool = option(
        False, "skip (and count) image files that cannot be decoded instead of stopping with an error",
        action="store_true")
    split: str = option("all", "dataset split", kind=choice(("train", "val", "all")))
    protocol: str = option(
        "in_situ", "in_situ: real forward, each component sees its real input; decomposition: every "
        "component applied to the embedding output (the paper's protocol)", kind=choice(PROTOCOLS))
    pairs: str = option(
        "halves", "halves: image i with i + B/2 of each batch of B images; all: every distinct pair of the B "
        "images (with --pair-data, X-X and Y-Y pairs too)", kind=choice(PAIRS))
    components: dict | None = option(
        None, "a component to measure, as a glob over module names ('*' = the layer index, '**' = any "
        "prefix, '?' and '[...]' inside a name); repeatable (a label given twice is made of both "
        "modules); replaces the presets", flag="--component", action="append", metavar="LABEL=GLOB",
        kind=Kind(parsing.component, parsing.component_option))
    embedding: str | None = option(
        None, "--protocol decomposition: the module whose output is e, or 'NAME:input' for its input "
        "(default: the preset's)", metavar="NAME")
    batches: int = option(4, "forward passes to accumulate", kind=integer(1))
    batch_size: int = option(
        128, "images per forward pass (B: B/2 pairs with halves or --pair-data, B(B-1)/2 with --pairs all)",
        kind=integer(2, MAX_BATCH, what=f"images per batch must be in 2..{MAX_BATCH} (one pair at least; "
                     "larger batches: --batches accumulates forward passes)"))
    seed: int = option(0, "data order, random initialisation and digits pretraining seed",
                       kind=integer(0, parsing.MAX_SEED))
    criterion: list = option(
        "plasticity", "what scores every (component, layer) unit, higher = finetune first; comma-separated "
        "for several: plasticity, rgn (relative gradient norm), fisher (empirical Fisher per parameter), cka "
        "(1 - linear CKA of a unit's input and output), spectral (power-law alpha of W^T W's eigenvalues), "
        "size (parameters); each writes NAME.json, .csv, .txt and figures beside run.json (see the criteria "
        "guide)", metavar="NAME[,NAME]", kind=csv(choice(tuple(CRITERIA)), unique=True))
    criterion_batches: int = option(
        4, "rgn, fisher, cka: labelled batches of --batch-size images of the downstream data (--pair-data, "
        "else --data) they read", kind=integer(1))
    criterion_seeds: list | None = option(
        None, "rgn, fisher: the seeds whose finetuning head they score with (the score: the mean over "
        "seeds; default: --seed)", metavar="S[,S]",
        kind=optional(csv(integer(0, parsing.MAX_SEED), unique=True)))
    out: str | None = option(
        None, "write plasticity.json, plasticity.png and run.json here, as one set (a new directory, or "
        "one a previous measure wrote; checked before measuring)", metavar="DIR")
    cache_dir: str | None = option(
        None, "where the digits ViT is cached (default $VITPLAST_CACHE or ~/.cache/vitplast)", metavar="DIR")
    pretrain_config: dict | None = option(
        None, "overrides of the digits ViT's DigitsConfig, e.g. '{\"epochs\": 5}' (a new cache entry)",
        metavar="JSON", kind=optional(Kind(parsing.json_object, _json_object)))

    def validate(self) -> None:
        """The default datasets (``data=None``: digits 0-4 matched with digits 5-9), then what involves
        several options."""
        if self.data is None:
            settle(self, data=DEFAULT_DATA, pair_data=self.pair_data or DEFAULT_PAIR_DATA)
        if self.batch_size % 2 and (self.pairs == "halves" or self.pair_data is not None):
            what = ("matched pairs take half from each dataset" if self.pair_data
                    else "--pairs halves pairs image i with i + B/2")
            raise OptionError(f"--batch-size {self.batch_size}: must be even ({what})")
        if self.embedding is not None and self.protocol != "decomposition":
            raise OptionError("--embedding names the input e of --protocol decomposition; it does not apply "
                              f"to protocol={self.protocol!r}")

