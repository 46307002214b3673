"""What a ``--model`` name names, the plan of what the model options build (`plan_model`: the source,
completed from a ``--weights`` model folder or finetune run directory), and whether the model options
would leave its weights at random init.

A name is one of:

- `DIGITS_MODEL` (``"digits-vit"``): the embedded ViT, whose weights the package builds and
  caches (`vitplast.models.digits`);
- ``hf:ID_OR_DIR``: a Hugging Face transformers image model, by hub id (``hf:google/vit-base-patch16-224``)
  or ``save_pretrained`` directory; it always comes with its weights;
- a directory holding a ``config.json``: a timm model folder (the file has an ``architecture``: read as
  timm's ``local-dir:DIR``) or a transformers one (``model_type``: read as ``hf:DIR``);
- anything else: a timm name, as ``timm.create_model`` takes it: a registry name, with a pretrained tag
  (``vit_tiny_patch16_224.augreg_in21k``), ``hf-hub:ORG/NAME[@REVISION]`` or ``local-dir:DIR``. Its
  pretrained weights are loaded only when asked (``--pretrained``), as in timm.

`check_weights_source` is the rule "nothing random by accident": a model whose weights would stay
at random init needs ``--random-init``; the way out of a refusal is ``--pretrained``, ``--weights FILE`` or
``--random-init``. ``--random-init`` builds the architecture at random init, which ``--weights`` (when
given too) then loads over; it contradicts ``--pretrained``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from pathlib import Path

DIGITS_MODEL = "digits-vit"  # the embedded default of every command's --model
DEFAULT_MODEL = DIGITS_MODEL  # what the option groups offer as --model's default, by role
HF_PREFIX = "hf:"
# keys of timm's pretrained_cfg_overlay that name the weights to load (used only with pretrained=True)
OVERLAY_WEIGHT_KEYS = ("file", "url", "hf_hub_id", "state_dict")
# --model-arg keys that another flag gives (what to pass instead)
REFUSED_MODEL_ARGS = {
    "checkpoint_path": "pass the checkpoint as --weights FILE",
    "trust_remote_code": "pass --trust-remote-code instead (it runs the Python code a model folder or hub "
                         "repository ships; only for a model whose code you trust)",
}
# --model-arg keys of timm's create_model whose value is a dict that may name a weights ``file``
CONFIG_ARGS = ("pretrained_cfg_overlay", "pretrained_cfg")
WAYS_OUT = "pass --pretrained (the model's published weights), --weights FILE, or --random-init"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A model name, read: ``kind`` is ``"digits"``, ``"timm"`` or ``"hf"``; ``ref`` is what the loader
    takes (the timm name, ``local-dir:DIR`` for a timm folder; the hub id or directory for transformers)."""

    kind: str
    name: str
    ref: str

    @property
    def always_pretrained(self) -> bool:
        """Whether the source comes with its weights (the digits ViT, a transformers model)."""
        return self.kind in ("digits", "hf")


def read_config(cfg: Path) -> dict:
    """The JSON object of a model folder's or run directory's ``config.json``; ValueError naming the file
    and what is wrong when it is unreadable, not JSON or not an object."""
    try:
        value = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{cfg}: cannot be read ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise ValueError(f"{cfg}: not valid JSON ({exc}); a model folder's config.json is one JSON "
                         "object") from None
    if not isinstance(value, dict):
        raise ValueError(f"{cfg}: expected a JSON object, found {type(value).__name__}")
    return value


def folder_config(path: str | os.PathLike) -> dict | None:
    """The ``config.json`` of a model folder (a dict), or None when ``path`` is not a folder holding one;
    ValueError naming the file when it holds one that is not a JSON object (corrupt, truncated)."""
    cfg = Path(path).expanduser() / "config.json"
    return read_config(cfg) if cfg.is_file() else None


def folder_kind(config: dict | None) -> str | None:
    """``"timm"`` for a timm model folder's config (``architecture``), ``"hf"`` for a transformers one
    (``model_type``), ``"finetune"`` for a vitplast finetune run's, else None."""
    config = config or {}
    return ("timm" if "architecture" in config else "hf" if "model_type" in config
            else "finetune" if "model" in config and "train" in config else None)


def model_source(name: str) -> ModelSource:
    """What ``name`` names (see the module docstring); ValueError for an empty ``hf:``."""
    if name == DIGITS_MODEL:
        return ModelSource("digits", name, name)
    if name.startswith(HF_PREFIX):
        ref = name[len(HF_PREFIX):].strip()
        if not ref:
            raise ValueError(f"{name!r}: expected hf:HUB_ID or hf:DIR (a save_pretrained directory)")
        folder = os.path.expanduser(ref)
        return ModelSource("hf", name, folder if os.path.isdir(folder) else ref)
    if (folder := weights_folder_source(name, name)) is not None:
        return folder
    if os.path.isdir(os.path.expanduser(name)):
        raise ValueError(f"{name!r} is a folder without a model's config.json (a timm or transformers model "
                         "folder holds one; a checkpoint goes to --weights)")
    if "/" in name and ":" not in name:
        raise ValueError(f"{name!r} looks like a Hugging Face hub id: say which library loads it, "
                         f"hf:{name} (transformers) or hf-hub:{name} (timm)")
    return ModelSource("timm", name, name)


def weights_folder_source(weights: str | os.PathLike | None, name: str | None = None) -> ModelSource | None:
    """The model a ``--weights`` folder describes: a timm or transformers model folder (a Hugging Face hub
    snapshot, a ``save_pretrained`` directory), read from its ``config.json``; None otherwise. It is
    named ``name`` (a ``--model`` naming the folder), else as the loader takes it (``local-dir:DIR``,
    ``hf:DIR``)."""
    kind = None if weights is None else folder_kind(folder_config(weights))
    path = os.path.expanduser(os.fspath(weights or ""))
    if kind == "timm":
        return ModelSource("timm", name or f"local-dir:{path}", f"local-dir:{path}")
    return ModelSource("hf", name or f"{HF_PREFIX}{path}", path) if kind == "hf" else None


@dataclasses.dataclass(frozen=True)
class ModelPlan:
    """What to build, before anything is built: the model's source, the local checkpoint loaded over it
    (``weights``), whether its published weights are loaded (``pretrained``), its constructor arguments
    and input size (None: the model's own), whether the model folder's own code may run
    (``trust_remote_code``, transformers models only)."""

    source: ModelSource
    weights: str | None
    pretrained: bool
    random_init: bool
    model_kwargs: dict
    img_size: int | None
    trust_remote_code: bool = False


@dataclasses.dataclass(frozen=True)
class ModelRequest:
    """The model asked for, as its user names it: the name (None: the model a ``weights`` folder or
    finetune run directory holds, else `DIGITS_MODEL`), its constructor arguments, a local checkpoint
    or model folder (``weights``), whether its published weights are loaded (``pretrained``) or it runs
    at random init (``random_init``), its input size (None: the model's own) and whether a model
    folder's own code may run (``trust_remote_code``). The command-line model options give one
    (`vitplast.options.groups.ModelOptions.model_request`); nothing here reads an option group."""

    model: str | None = None
    model_kwargs: dict = dataclasses.field(default_factory=dict)
    weights: str | None = None
    pretrained: bool = False
    random_init: bool = False
    img_size: int | None = None
    trust_remote_code: bool = False


def plan_model(request: ModelRequest) -> ModelPlan:
    """The `ModelPlan` of a `ModelRequest` (nothing is built; a ``weights`` folder and a finetune
    run directory give the model they hold)."""
    trust = bool(request.trust_remote_code)
    folder = weights_folder_source(request.weights)
    if folder is not None and _same_architecture(request.model, folder):  # a model folder: its model
        source = ModelSource(folder.kind, request.model or folder.name, folder.ref)
        return ModelPlan(source, None, True, False, dict(request.model_kwargs), request.img_size, trust)
    name, run_kwargs, img_size = resolve_architecture(request.model, request.weights, request.img_size)
    source = model_source(name)
    pretrained = bool(request.pretrained) or (source.kind == "hf" and not request.random_init)
    kwargs = {**run_kwargs, **request.model_kwargs}
    return ModelPlan(source, request.weights, pretrained, bool(request.random_init), kwargs, img_size,
                     trust)


def _same_architecture(model: str | None, folder: ModelSource) -> bool:
    """Whether ``--model`` (None: not given) names the model of a ``--weights`` folder."""
    if model is None:
        return True
    if folder.kind == "hf":
        return model_source(model).kind == "hf" and model_source(model).ref == folder.ref
    config = read_config(Path(folder.ref.partition(":")[2]) / "config.json")
    return model.split(".")[0] == str(config.get("architecture")) or model == folder.name


def finetune_run_config(weights: str | os.PathLike | None) -> dict | None:
    """The ``config.json`` of the finetune run that wrote ``weights`` (a run directory, or a file in
    one), or None."""
    p = None if weights is None else Path(weights).expanduser()
    if p is None or not (p.is_dir() or p.name in ("checkpoint.pt", "model.safetensors")):
        return None
    cfg = folder_config(p if p.is_dir() else p.parent)
    return cfg if cfg is not None and "model" in cfg and "train" in cfg else None


def resolve_architecture(model: str | None, weights, img_size: int | None) -> tuple[str, dict, int | None]:
    """``(model name, timm constructor kwargs, img_size)``: what was asked, completed from the finetune
    run that wrote ``weights`` when ``model`` is None or that run's model."""
    run = finetune_run_config(weights)
    kwargs: dict = {}
    if run is not None and model in (None, run["model"]):
        model = run["model"]
        kwargs = dict(run.get("model_kwargs") or {})
        if img_size is None and run.get("img_size"):
            img_size = int(run["img_size"])
    return model or DIGITS_MODEL, kwargs, img_size


def overlay_weights(model_kwargs: dict) -> list[str]:
    """The keys of ``--model-arg pretrained_cfg_overlay=...`` that name weights (``file``, ``url``, ...)."""
    overlay = model_kwargs.get("pretrained_cfg_overlay")
    return [k for k in OVERLAY_WEIGHT_KEYS if isinstance(overlay, dict) and overlay.get(k)]


def model_arg_files(model_kwargs: dict) -> dict[str, str]:
    """``{option wording: path}`` of every file a ``--model-arg`` names for timm to read (the ``file`` of
    ``pretrained_cfg_overlay`` or ``pretrained_cfg``, a ``file`` argument)."""
    found = {}
    for key in CONFIG_ARGS:
        value = model_kwargs.get(key)
        if isinstance(value, dict) and value.get("file") is not None:
            found[f"--model-arg {key} file"] = value["file"]
    if model_kwargs.get("file") is not None:
        found["--model-arg file"] = model_kwargs["file"]
    return found


def _fits(value, hint) -> bool:
    """Whether a JSON value fits the type ``hint`` of a pretrained-config field (lists for tuples)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True
    if hint is type(None):
        return value is None
    if origin is typing.Union:
        return any(_fits(value, a) for a in args)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis or len(args) == 1:  # (X, ...); timm's Tuple[str] too
            return all(_fits(v, args[0]) for v in value)
        return len(value) == len(args) and all(_fits(v, a) for v, a in zip(value, args, strict=True))
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1])
                                               for k, v in value.items())
    if hint in (int, float):  # an int fits a float
        return isinstance(value, (int, hint)) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def check_config_args(model_kwargs: dict) -> None:
    """ValueError naming the ``--model-arg`` when ``pretrained_cfg_overlay`` (or a ``pretrained_cfg``
    given as a dict) is not what timm's pretrained config takes: a JSON object of its fields, each of its
    type (timm's own message would blame every --model-arg, or come from deep inside the model)."""
    import difflib

    for key in CONFIG_ARGS:
        value = model_kwargs.get(key)
        if value is None or (key == "pretrained_cfg" and isinstance(value, str)):  # a pretrained tag
            continue
        what = f"--model-arg {key}"
        if not isinstance(value, dict):
            raise ValueError(f"{what}: expected a JSON object of timm's pretrained config fields "
                             f"({{\"file\": PATH, \"mean\": [R, G, B], ...}}), got "
                             f"{json.dumps(value, default=str)[:60]}")
        from timm.models import PretrainedCfg  # heavy (torch): only when there is a config to check

        fields = typing.get_type_hints(PretrainedCfg)  # {field: type}: what pretrained_cfg_overlay may set
        for name, item in value.items():
            if name not in fields:
                close = difflib.get_close_matches(str(name), list(fields), n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise ValueError(f"{what}: {name!r} is not a field of timm's pretrained config{hint}")
            if not _fits(item, fields[name]):
                hint = fields[name]
                wanted = (hint.__name__ if isinstance(hint, type) else
                          str(hint).replace("typing.", "").replace("NoneType", "None"))
                got = json.dumps(item, default=str)[:60]
                raise ValueError(f"{what}: {name}: expected {wanted}, got {got}")


def check_weight_files(model_kwargs: dict) -> None:
    """The files ``--model-arg`` names get the checks ``--weights`` gets before anything is read (it
    exists, is a regular file, has a checkpoint's suffix): a ValueError naming the option and the file.
    A malformed ``pretrained_cfg_overlay`` is refused first (`check_config_args`)."""
    check_config_args(model_kwargs)
    files = model_arg_files(model_kwargs)
    if not files:
        return
    from .checkpoints import check_checkpoint_file  # heavy: torch; the option checks stay torch-free

    for what, path in files.items():
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"{what}: expected a file path, got {path!r}")
        check_checkpoint_file(path, what)


def check_weights_source(model: str | None, weights, pretrained: bool, random_init: bool,
                         model_kwargs: dict) -> None:
    """ValueError (its message starting with the flag) when the options contradict each other, or would
    run ``model`` with random weights without ``random_init``. ``model=None`` stands for the command's
    default (the digits ViT, or the model of a ``weights`` folder)."""
    for key, instead in REFUSED_MODEL_ARGS.items():
        if key in model_kwargs:
            raise ValueError(f"--model-arg {key}: {instead}")
    if pretrained and random_init:
        raise ValueError("--random-init: it contradicts --pretrained; pass one of them")
    if weights is not None and pretrained:
        raise ValueError("--pretrained: --weights already gives the weights; pass one of them")
    check_weight_files(model_kwargs)
    named = overlay_weights(model_kwargs)
    if named and not pretrained:
        raise ValueError(f"--model-arg pretrained_cfg_overlay: its {', '.join(named)} names weights, which "
                         "timm loads only with --pretrained")
    try:
        source = None if model is None else model_source(model)
    except ValueError as exc:
        raise ValueError(f"--model: {exc}") from None
    if source is not None and weights is None and not (pretrained or random_init or source.always_pretrained):
        raise ValueError(f"--model {model}: no weights would be loaded, so it would run randomly "
                         f"initialised; {WAYS_OUT}")
