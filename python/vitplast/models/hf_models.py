"""Hugging Face transformers image models (``--model hf:ID_OR_DIR``): built with the Auto classes, run as
the commands run every model (images in, logits out), prepared as their image processor says.

- `create_hf`: ``AutoModelForImageClassification`` from a hub id (the hub and its local cache,
  ``HF_HUB_OFFLINE`` honoured) or a ``save_pretrained`` directory, with its weights, or from its config
  alone (``random_init``), wrapped in `HFImageClassifier`;
- `hf_data_config`: the model's input preparation from its ``AutoImageProcessor`` (or, for a folder
  without ``preprocessor_config.json``, the defaults of the processor class of its model type), in the
  form of timm's data config, so one transform builder serves both;
- `hf_origin`: where the weights came from (hub id and revision, or the folder; the weights file);
- `build_hf`: the transformers family's builder, which puts them together.

The components of a transformers ViT come from the ``hf-vit``/``hf-vit-layers`` presets of
`vitplast_kernels.measure.presets` (their leading ``**`` takes the wrapper's ``model.`` prefix).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from torch import nn

from ..data.transforms import from_data_config
from ..outputs.json_files import read_json_file
from .built import BuildRequest, BuiltModel, input_size
from .checkpoints import align_prefix, tensor_dtypes
from .hub import cached_hub_file, hub_error, offline_unless_reachable, snapshot_revision, split_revision
from .weights import refuse_non_floating

if TYPE_CHECKING:
    from .sources import ModelPlan

# PIL resampling codes (what image processors store) -> timm / torchvision interpolation names
RESAMPLE_NAMES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
NO_DECAY = ("*cls_token", "*position_embeddings", "*mask_token", "*distillation_token", "*register_tokens")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")  # sharded weights


class HFImageClassifier(nn.Module):
    """A transformers image-classification model taking images ``(N, 3, H, W)`` float32 and returning
    logits ``(N, num_classes)``; its head is ``model.classifier`` (timm's ``get_classifier`` /
    ``reset_classifier`` names, so the head finder and finetuning treat it like a timm model)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images):
        return self.model(pixel_values=images).logits

    @property
    def image_size(self) -> int | None:
        size = getattr(self.model.config, "image_size", None)
        return int(size[-1] if isinstance(size, (list, tuple)) else size) if size else None

    def get_classifier(self) -> nn.Module | None:
        return getattr(self.model, "classifier", None)

    def reset_classifier(self, num_classes: int) -> None:
        """A fresh ``num_classes`` head (drawn from the torch RNG) in place of the classifier."""
        head = self.get_classifier()
        features = getattr(head, "in_features", None) or getattr(self.model.config, "hidden_size", None)
        if not isinstance(head, nn.Linear) or features is None:
            raise ValueError(f"{type(self.model).__name__}: its classifier is not a linear layer; cannot "
                             "replace it for the new classes")
        self.model.classifier = nn.Linear(features, num_classes)
        self.model.config.num_labels = num_classes

    def no_weight_decay(self) -> set[str]:
        """Parameter-name patterns kept out of weight decay (timm's rule: embeddings and tokens)."""
        return set(NO_DECAY)


@contextlib.contextmanager
def _loading(ref: str):
    """transformers' own logging and progress bars held to errors while a model is built, and a hub id
    read from the local cache alone when the hub cannot be reached (`offline_unless_reachable`); yields
    ``(source, revision)``: what ``from_pretrained`` takes for ``ref``, a folder or ``HUB_ID[@REVISION]``."""
    from transformers.utils import logging as hf_logging

    folder = os.path.isdir(os.path.expanduser(ref))
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with contextlib.nullcontext() if folder else offline_unless_reachable():
            yield (ref, None) if folder else split_revision(ref)
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


class RemoteCodeRefused(ValueError):
    """A transformers model (or its image processor) that needs the Python code its folder or hub
    repository ships, asked for without ``--trust-remote-code``: nothing of that code was run."""


def _needs_remote_code(exc: BaseException) -> bool:
    """Whether transformers refused ``exc``'s load because it would have to run the model's own code."""
    return isinstance(exc, ValueError) and "trust_remote_code" in str(exc)


def remote_code_refused(ref: str, what: str = "") -> RemoteCodeRefused:
    """The refusal of ``hf:REF``, whose ``what`` (its config, its image processor) needs its own code."""
    where = f"folder {ref}" if os.path.isdir(os.path.expanduser(ref)) else f"hub repository {ref}"
    return RemoteCodeRefused(
        f"--model hf:{ref}: {what or 'its config.json'} asks to run Python code shipped with the model "
        f"({where}; an auto_map entry), which vitplast never runs unless told to; read that code, then pass "
        "--trust-remote-code (trust_remote_code=True) to allow it")


def _failure(ref: str, exc: BaseException) -> ValueError:
    """A failed load as one line; offline, it says that only the local cache was read, and which."""
    from huggingface_hub import constants

    text = hub_error(exc) or (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if constants.HF_HUB_OFFLINE and "HF_HUB_OFFLINE" not in text:
        text += f" (HF_HUB_OFFLINE is set: only the Hugging Face cache {constants.HF_HUB_CACHE} is read)"
    return ValueError(f"--model hf:{ref}: {text}")


def _is_weights_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a weights file that cannot be read (safetensors' error, a truncated or
    foreign pickle), not another failure of the load."""
    import pickle

    text = str(exc)
    return (type(exc).__name__ == "SafetensorError" or isinstance(exc, (EOFError, pickle.UnpicklingError))
            or (isinstance(exc, RuntimeError) and any(s in text for s in ("PytorchStreamReader",
                                                                          "invalid load key", "unpickl"))))


def create_hf(ref: str, num_classes: int | None = None, *, random_init: bool = False,
              trust_remote_code: bool = False, **from_pretrained) -> HFImageClassifier:
    """The transformers image classifier ``ref`` (a hub id or a directory), in eval mode, float32, on the
    CPU: its published weights, or its config alone with ``random_init`` (drawn from the torch RNG).
    ``num_classes``: a fresh head for that many classes (None: the model's own head). ValueError for a
    model that cannot be had or is no image classifier.

    Every transformers call gets ``trust_remote_code`` (False by default): no Python code of the model's
    folder or repository runs, and no prompt reads standard input; a model that needs its own code
    raises `RemoteCodeRefused`. ``from_pretrained`` may not hold ``trust_remote_code``."""
    try:
        from transformers import AutoConfig, AutoModelForImageClassification
    except ImportError as exc:
        raise ImportError("hf: models need transformers: pip install transformers") from exc

    if "trust_remote_code" in from_pretrained:
        raise ValueError("--model-arg trust_remote_code: pass --trust-remote-code instead "
                         "(create_hf(trust_remote_code=...))")
    trust = bool(trust_remote_code)
    config = None
    with _loading(ref) as (source, revision):
        try:
            config = AutoConfig.from_pretrained(source, revision=revision, trust_remote_code=trust)
            if random_init:
                model = AutoModelForImageClassification.from_config(config, trust_remote_code=trust,
                                                                    **from_pretrained)
            else:
                model = AutoModelForImageClassification.from_pretrained(
                    source, revision=revision, trust_remote_code=trust, **from_pretrained)
        except TypeError as exc:
            raise ValueError(
                f"--model-arg: hf:{ref} does not take {sorted(from_pretrained)}: {exc}") from None
        except (OSError, ValueError, KeyError) as exc:
            if not trust and _needs_remote_code(exc):
                raise remote_code_refused(ref, "its config.json" if config is None else
                                          "its model class") from None
            if "Unrecognized configuration class" in str(exc):
                raise ValueError(f"--model hf:{ref}: not an image-classification model (model_type "
                                 f"{getattr(config, 'model_type', '?')!r})") from None
            raise _failure(ref, exc) from None
        except Exception as exc:  # a corrupt weights file: safetensors' own error, a pickle's, ...
            if config is None or not _is_weights_error(exc):
                raise
            # the weights file that cannot be read, named (the folder's, or the hub cache's)
            origin = hf_origin(ref)
            found = origin.get("file") or origin.get("dir") or ref
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ValueError(f"--model hf:{ref}: its weights file {found} is not readable (truncated or "
                             f"corrupt?): {type(exc).__name__}: {text}") from None
    if not random_init:
        # `refuse_non_floating` for the weights files transformers read: it casts integer or boolean
        # tensors to the model's floating ones in silence
        own = model.state_dict()
        for path in hf_weight_files(ref):
            refuse_non_floating(model, align_prefix(tensor_dtypes(path), own),
                                f"--model hf:{ref}: its weights file {str(path)!r}", own=own, renamed=True)
    net = HFImageClassifier(model)
    if num_classes is not None:
        net.reset_classifier(num_classes)
    return net.eval()


def hf_weight_files(ref: str) -> list[Path]:
    """The weights files transformers reads for ``ref``: the folder's (for a hub id, the local cache
    snapshot's) ``model.safetensors`` or ``pytorch_model.bin``, else the shards its index lists; [] when
    none is found."""
    path = Path(os.path.expanduser(ref))
    if not path.is_dir():
        repo, revision = split_revision(ref)
        found = cached_hub_file(repo, [*WEIGHT_FILES, *INDEX_FILES], revision).get("file")
        if not found:
            return []
        path = Path(found).parent
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            return [path / name]
    for name in INDEX_FILES:
        if (path / name).is_file():
            index = read_json_file(path / name)
            shards = index.get("weight_map") if isinstance(index, dict) else None
            shards = shards if isinstance(shards, dict) else {}
            names = sorted({s for s in shards.values() if isinstance(s, str)})
            return [path / s for s in names if "/" not in s and (path / s).is_file()]
    return []


def _processor(ref: str, config, trust_remote_code: bool = False):
    """``(image processor, where it came from)``: the model's own, else its model type's defaults, else
    ``(None, reason)``; `RemoteCodeRefused` when its own needs code of the model's folder and
    ``trust_remote_code`` is False."""
    from transformers import AutoImageProcessor

    with _loading(ref) as (source, revision):
        try:
            return (AutoImageProcessor.from_pretrained(source, revision=revision,
                                                       trust_remote_code=bool(trust_remote_code)),
                    "its image processor")
        except (OSError, ValueError, KeyError) as exc:
            if not trust_remote_code and _needs_remote_code(exc):
                raise remote_code_refused(ref, "its image processor (preprocessor_config.json)") from None
        from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING

        try:
            classes = IMAGE_PROCESSOR_MAPPING[type(config)]
        except KeyError:
            return None, f"no image processor for model type {config.model_type!r}"
        listed = classes if isinstance(classes, (list, tuple)) else [classes]
        cls = (next(iter(classes.values())) if isinstance(classes, dict) else
               next(c for c in listed if c is not None))
        return cls(), f"the defaults of {cls.__name__} (no preprocessor_config.json)"


def _size_of(size, key: str) -> int | None:
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return int(value) if value else None


def hf_data_config(ref: str, net: HFImageClassifier, *, trust_remote_code: bool = False) -> tuple[dict, str]:
    """``(data config, where it came from)``: the model's input preparation in timm's data-config form
    (``input_size``, ``interpolation``, ``mean``, ``std``, ``crop_pct``, ``crop_mode``), read from its
    image processor; the input size is the model config's ``image_size``."""
    processor, source = _processor(ref, net.model.config, trust_remote_code)
    side = net.image_size or 224
    mean, std, interpolation, crop_pct, crop_mode = (0.5,) * 3, (0.5,) * 3, "bilinear", 1.0, "squash"
    if processor is not None:
        if getattr(processor, "do_normalize", True):
            mean, std = tuple(map(float, processor.image_mean)), tuple(map(float, processor.image_std))
        else:
            mean, std = (0.0,) * 3, (1.0,) * 3
        resample = getattr(processor, "resample", None)
        interpolation = RESAMPLE_NAMES.get(int(resample) if resample is not None else 2, "bilinear")
        edge = _size_of(getattr(processor, "size", None), "shortest_edge")
        crop = _size_of(getattr(processor, "crop_size", None), "height")
        if edge:  # the shorter side resized, then (maybe) a centre crop
            crop_mode = "center"
            if getattr(processor, "do_center_crop", False) and crop:
                crop_pct = min(1.0, crop / edge)
    return {"input_size": (3, side, side), "interpolation": interpolation, "mean": mean, "std": std,
            "crop_pct": crop_pct, "crop_mode": crop_mode}, source


def hf_origin(ref: str) -> dict:
    """Where the weights of ``ref`` come from: ``{"dir", "file", "revision"}`` for a folder (the revision
    when it is a hub cache snapshot), ``{"hub_id", "file", "revision"}`` for a hub id (from the cache)."""
    path = Path(os.path.expanduser(ref))
    if path.is_dir():
        found = next((path / f for f in WEIGHT_FILES if (path / f).is_file()), None)
        return {"dir": str(path), "file": str(found) if found else None, "revision": snapshot_revision(path)}
    repo, revision = split_revision(ref)
    return {"hub_id": repo, **cached_hub_file(repo, WEIGHT_FILES, revision)}


def build_hf(plan: ModelPlan, request: BuildRequest) -> BuiltModel:
    """The transformers family's `BuiltModel`: the image classifier with its weights (its config alone
    with ``plan.random_init``; ``plan.weights`` the builder loads over it), the head replaced when
    ``request.num_classes`` differs from its own; its input preparation is its image processor's."""
    net = create_hf(plan.source.ref, random_init=plan.random_init, trust_remote_code=plan.trust_remote_code,
                    **plan.model_kwargs)
    own = net.image_size
    if plan.img_size is not None and own is not None and plan.img_size != own:
        raise ValueError(f"--img-size {plan.img_size}: {plan.source.name} takes {own}x{own} images (its "
                         "config's image_size)")
    if getattr(net.get_classifier(), "out_features", request.num_classes) != request.num_classes:
        net.reset_classifier(request.num_classes)
    if plan.weights is not None:
        origin, how = {"kind": "weights", "file": str(plan.weights)}, f"weights {plan.weights}"
    elif plan.random_init:
        origin, how = {"kind": "random"}, "its config, random init"
    else:
        origin, how = {"kind": "pretrained", **hf_origin(plan.source.ref)}, "its pretrained weights"
    config, source = hf_data_config(plan.source.ref, net, trust_remote_code=plan.trust_remote_code)
    size = input_size(net, plan.img_size)
    transform = from_data_config(config, f"{plan.source.name}: {source}").resized(size)
    desc = f"{plan.source.name} (transformers {type(net.model).__name__}, {how})"
    return BuiltModel(net.eval(), size, desc, plan.source.name, dict(plan.model_kwargs), transform, origin,
                      plan.trust_remote_code)
