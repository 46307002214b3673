"""Reading a local checkpoint into a plain ``{name: tensor}`` state dict, whatever wrote it.

``read_state_dict(path)`` accepts:

- ``*.safetensors``;
- ``*.pth`` / ``*.pt`` / ``*.bin`` / ``*.ckpt``: a state dict, or one wrapped as ``{"state_dict": ..}``
  (Lightning's ``.ckpt``), ``{"model": ..}`` or ``{"module": ..}`` (EMA weights, ``state_dict_ema``/
  ``model_ema``, first, as timm's ``load_checkpoint`` reads its training checkpoints), read by
  `load_weights_only` (``torch.load(weights_only=True)``, also what reads a run's
  ``checkpoint.pt``): nothing but tensors and plain containers is unpickled (plus numpy arrays, which
  random-number-generator states may hold, and the ``argparse.Namespace`` of timm's training arguments);
- a ``vitplast finetune`` run directory (its ``model.safetensors`` export when present, else its
  ``checkpoint.pt``).

Prefixes of wrappers are removed (``module.`` from DDP, with timm's ``clean_state_dict``; ``_orig_mod.``
from ``torch.compile``, ``base_model.model.`` from peft; a LightningModule's attribute, such as
``model.``, by `align_prefix` once the model's own names are known), and peft LoRA adapters are
merged into the weights they adapt (``W + B @ A * alpha / r``; peft's copies of ``modules_to_save``
replace the originals). Every problem — a missing, truncated or corrupt file, a pickle holding other
objects — raises `CheckpointError` (a ``ValueError``) naming the file.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
from pathlib import Path

import numpy as np
import torch

from ..outputs.text import plain_text, strip_escapes

STATE_DICT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")
NPZ_SUFFIXES = (".npz",)  # big_vision / JAX archives, read by the model's own loader
RUN_DIR_FILES = ("model.safetensors", "checkpoint.pt")  # what a finetune run directory offers, in order
# wrapper keys, in order of preference (timm training checkpoints: EMA weights first, as timm loads them)
WRAPPER_KEYS = ("state_dict_ema", "model_ema", "state_dict", "model", "module")
PREFIXES = ("module.", "_orig_mod.", "base_model.model.")
_WRAPPER_PREFIXES = re.compile(f"^(?:{'|'.join(map(re.escape, PREFIXES))})+")  # any run of them, at the start
# LoRA scale alpha / r: `vitplast finetune --train lora` uses vitplast.finetune.trainable.apply_lora's alpha
LORA_ALPHA = 16.0


class CheckpointError(ValueError):
    """A checkpoint cannot be read (the message names the file and what is wrong)."""


class MissingCheckpoint(CheckpointError, FileNotFoundError):
    """A checkpoint path that does not exist (a ``ValueError`` and a ``FileNotFoundError``)."""


def resolve_path(path: str | os.PathLike, what: str = "weights") -> Path:
    """The checkpoint file of ``path``: the file itself, or the file a finetune run directory holds.
    `MissingCheckpoint` when nothing is there, `CheckpointError` for something that is not
    a regular file (a device such as ``/dev/zero``, a FIFO, a socket: never opened); ``what`` starts the
    message (the option that named the file)."""
    p = Path(path).expanduser()
    if p.is_dir():
        if found := [p / name for name in RUN_DIR_FILES if (p / name).is_file()]:
            return found[0]
        raise CheckpointError(f"{what}: {str(p)!r} is a directory without {' or '.join(RUN_DIR_FILES)} "
                              "(a vitplast finetune run directory holds them)")
    if not p.exists():
        raise MissingCheckpoint(f"{what}: no such file {str(p)!r}")
    if not p.is_file():
        raise CheckpointError(f"{what}: {str(p)!r} is not a regular file (a device, FIFO or socket), so it "
                              "is not read; pass a checkpoint file")
    return p


def check_checkpoint_file(path: str | os.PathLike, what: str) -> Path:
    """The checks ``--weights`` gets before anything is read, for a file another option names (timm's
    ``pretrained_cfg_overlay`` ``file``): it exists, is a regular file, and has a checkpoint's suffix;
    `CheckpointError` (``what`` starting its message) otherwise."""
    p = resolve_path(path, what)
    if p.suffix.lower() not in STATE_DICT_SUFFIXES + NPZ_SUFFIXES:
        raise _unknown_type(what, p)
    return p


def _unknown_type(what: str, p: Path, more: str = "") -> CheckpointError:
    suffix = repr(p.suffix.lower()) if p.suffix else "(none)"
    return CheckpointError(f"{what}: unknown checkpoint type {suffix} for {str(p)!r}; expected one of "
                           f"{STATE_DICT_SUFFIXES + NPZ_SUFFIXES}{more}")


def _unreadable(path: Path, kind: str) -> str:
    """``not a readable KIND`` and why: the file starts as text does (UTF-8, no NUL byte), which no
    checkpoint format does, else it is truncated or corrupt."""
    with open(path, "rb") as f:
        head = f.read(512)
    try:
        text = b"\0" not in head and bool(head.decode("utf-8"))
    except UnicodeDecodeError:
        text = False
    return f"not a readable {kind} ({'it holds text' if text else 'truncated or corrupt?'})"


def weights_only_globals() -> list:
    """The types a weights-only load may rebuild besides tensors and plain values: numpy arrays (the RNG
    states a checkpoint may hold) and ``argparse.Namespace`` (timm's training checkpoints keep their
    arguments in one: a plain attribute holder)."""
    core = getattr(np, "_core", None) or np.core
    dtype_classes = [type(np.dtype(t)) for t in ("uint32", "int64", "float64", "bool")]  # numpy >= 1.25
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, *dtype_classes, argparse.Namespace]


def load_weights_only(path: str | os.PathLike, what: str, *, error: type[ValueError] = CheckpointError,
                      objects_advice: str = "save a state dict (model.state_dict()) or a .safetensors file",
                      unreadable_advice: str = "") -> object:
    """``torch.load(path, weights_only=True)`` on the CPU: the one weights-only loader. Nothing but
    tensors, plain values and containers is unpickled (plus the types of `weights_only_globals`).

    Raises ``error`` whose message starts with ``what`` (the file as the caller names it) and ends with
    the caller's advice: the pickle holds other objects (the refused global named), or the file is not a
    readable checkpoint (truncated or corrupt)."""
    try:
        with torch.serialization.safe_globals(weights_only_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise error(f"{what} holds Python objects other than tensors and plain values, which are not loaded "
                    f"({unpickling_reason(exc)}); {objects_advice}") from None
    except MemoryError:
        raise
    except Exception as exc:  # a truncated or foreign file fails in many ways (KeyError, IndexError, ...)
        raise error(f"{what} is {_unreadable(Path(path), 'PyTorch checkpoint')}: {type(exc).__name__}: "
                    f"{_one_line(exc)}"
                    + (f"; {unreadable_advice}" if unreadable_advice else "")) from None


def _one_line(exc: BaseException) -> str:
    text = strip_escapes(str(exc)).strip()
    return plain_text(text.splitlines()[0] if text else type(exc).__name__)[:200]


def unpickling_reason(exc: BaseException) -> str:
    """What a weights-only ``torch.load`` refused, in one plain line (torch's message spans lines, with
    terminal escapes; its ``WeightsUnpickler error:`` line names the refused global)."""
    lines = strip_escapes(str(exc)).splitlines()
    for line in lines:
        if "WeightsUnpickler error:" in line:
            return plain_text(line.split("WeightsUnpickler error:", 1)[1].split(". Please", 1)[0])[:200]
    for line in lines:  # "Trying to load unsupported GLOBAL posix.system whose module posix is blocked."
        if "GLOBAL" in line:
            return plain_text(line)[:200]
    return _one_line(exc)


def _unwrap(obj: object, path: Path) -> dict[str, torch.Tensor]:
    """The state dict inside ``obj`` (a state dict, or one under a wrapper key)."""
    for _ in range(3):
        if not isinstance(obj, dict) or _is_state_dict(obj):
            break
        obj = next((obj[k] for k in WRAPPER_KEYS if isinstance(obj.get(k), dict)), obj)
    odd = [k for k in obj if not isinstance(k, str)] if isinstance(obj, dict) else []
    if odd:
        kinds = "/".join(sorted({type(k).__name__ for k in odd}))
        raise CheckpointError(f"weights: {str(path)!r} holds a mapping with {kinds} keys ({odd[:4]}); a "
                              "state dict maps tensor names (strings) to tensors")
    if not isinstance(obj, dict) or not _is_state_dict(obj):
        keys = sorted(obj, key=str)[:6] if isinstance(obj, dict) else type(obj).__name__
        raise CheckpointError(f"weights: {str(path)!r} holds no state dict (a mapping of names to tensors, "
                              f"possibly under {'/'.join(WRAPPER_KEYS)}); found {keys}")
    return {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}


def _is_state_dict(d: dict) -> bool:
    return bool(d) and all(isinstance(k, str) for k in d) and any(isinstance(v, torch.Tensor)
                                                                  for v in d.values())


def strip_prefixes(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with wrapper prefixes (`PREFIXES`) removed from every name."""
    from timm.models import clean_state_dict

    return {_WRAPPER_PREFIXES.sub("", k): v for k, v in clean_state_dict(state).items()}


def _leading(names, depth: int = 2) -> set[str]:
    """The prefixes of ``names`` made of their first 1..``depth`` segments (``"a."``, ``"a.b."``)."""
    return {".".join(parts[:i]) + "." for parts in (name.split(".") for name in names)
            for i in range(1, min(depth, len(parts) - 1) + 1)}


def align_prefix(state: dict[str, torch.Tensor], names) -> dict[str, torch.Tensor]:
    """``state`` renamed to fit a model whose tensors are ``names``: the one leading prefix whose removal
    (a wrapper's attribute: a LightningModule's ``model.``; the wrapper's other tensors are left out) or
    addition (the model wraps what the checkpoint holds) makes the most names the model's. Unchanged when
    its names are the model's already, or no prefix makes more of them match."""
    own = set(names)

    def hits(renamed: dict) -> int:
        return sum(k in own for k in renamed)

    if hits(state) == len(state):
        return state
    removed = [{k[len(p):]: v for k, v in state.items() if k.startswith(p)} for p in sorted(_leading(state))]
    added = [{p + k: v for k, v in state.items()} for p in sorted(_leading(own))]
    return max([state, *removed, *added], key=hits)  # the first of the best: unchanged on a tie


_LORA = re.compile(r"^(?P<mod>.+)\.lora_(?P<ab>[AB])\.(?P<adapter>[^.]+)\.weight$")
_SAVED = re.compile(r"^(?P<mod>.+)\.modules_to_save\.(?P<adapter>[^.]+)\.(?P<rest>.+)$")


def merge_lora(state: dict[str, torch.Tensor], alpha: float = LORA_ALPHA) -> dict[str, torch.Tensor]:
    """A peft LoRA state dict turned into the plain model's: ``W = W0 + B @ A * alpha / r`` on every
    adapted linear layer (``r`` = the rank, A's rows), ``modules_to_save`` copies in place of the
    originals. A state dict without adapters is returned as it is."""
    if not any(_LORA.match(k) or _SAVED.match(k) for k in state):
        return state
    out: dict[str, torch.Tensor] = {}
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in state.items():
        if m := _LORA.match(k):
            pairs.setdefault(m["mod"], {})[m["ab"]] = v
        elif m := _SAVED.match(k):
            out[f"{m['mod']}.{m['rest']}"] = v
        elif ".original_module." not in k:
            out[k.replace(".base_layer.", ".")] = v
    for mod, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise CheckpointError(f"weights: LoRA adapter of {mod!r} has {sorted(ab)} but needs both A and B")
        a, b = ab["A"].double(), ab["B"].double()
        w = out.get(f"{mod}.weight")
        if w is None or w.shape != (b.shape[0], a.shape[1]):
            raise CheckpointError(f"weights: LoRA adapter of {mod!r} ({tuple(b.shape)} @ {tuple(a.shape)}) "
                                  f"does not fit its weight {None if w is None else tuple(w.shape)}")
        out[f"{mod}.weight"] = (w.double() + (b @ a) * (alpha / a.shape[0])).to(w.dtype)
    return out


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The plain state dict of the checkpoint at ``path`` (see the module docstring)."""
    p = resolve_path(path)
    if p.suffix.lower() not in STATE_DICT_SUFFIXES:
        raise _unknown_type("weights", p, " or a vitplast finetune run directory")
    if p.suffix.lower() == ".safetensors":
        from safetensors.torch import load_file

        try:
            obj = load_file(str(p), device="cpu")
        except Exception as exc:  # safetensors raises its own SafetensorError, or OSError / ValueError
            raise CheckpointError(f"weights: {str(p)!r} is {_unreadable(p, '.safetensors file')}: "
                                  f"{_one_line(exc)}") from None
    else:
        obj = load_weights_only(p, f"weights: {str(p)!r}")
    return merge_lora(strip_prefixes(_unwrap(obj, p)))


SAFETENSORS_HEADER_MAX = 100 * 2**20  # safetensors' own bound on the size of a header
SAFETENSORS_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
                      "I32": torch.int32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16,
                      "F32": torch.float32, "F64": torch.float64, "C64": torch.complex64}


def tensor_dtypes(path: str | os.PathLike) -> dict[str, object]:
    """``{tensor name: dtype}`` of the checkpoint file at ``path``: for a ``.safetensors`` file read from
    its header alone (no tensor data; torch dtypes, or the header's name of a type torch lacks such as
    ``U16``), else the dtypes of the tensors `read_state_dict` reads. `CheckpointError` naming the file
    when it cannot be read."""
    p = Path(path)
    if p.suffix.lower() != ".safetensors":
        return {k: v.dtype for k, v in read_state_dict(p).items()}
    try:
        with open(p, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 0 < size <= min(SAFETENSORS_HEADER_MAX, p.stat().st_size - 8):
                raise ValueError(f"a header of {size} bytes does not fit the file")
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
    except (OSError, ValueError) as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"weights: {str(p)!r} is not a readable .safetensors file (truncated or "
                              f"corrupt?): {_one_line(exc)}") from None
    return {k: SAFETENSORS_DTYPES.get(v.get("dtype"), v.get("dtype")) for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict)}


def read_checkpoint(weights: str | os.PathLike, what: str = "weights",
                    names=None) -> tuple[Path, dict[str, torch.Tensor] | None]:
    """The checkpoint ``weights`` (a file or a finetune run directory; another option's file, ``what``
    naming it) read for a model whose tensors are ``names`` (None: as the file names them):
    `check_checkpoint_file`, then its tensors read as ``--weights`` reads them (nothing but tensors
    unpickled). Returns ``(its file, its tensors named as the model's)`` (`align_prefix`); the tensors
    are None for a ``.npz`` archive, which the model's own loader reads. `MissingCheckpoint` when it
    does not exist, `CheckpointError` naming ``what`` and the file for an unknown type or a file that
    cannot be read."""
    path = check_checkpoint_file(weights, what)
    if path.suffix.lower() in NPZ_SUFFIXES:
        return path, None
    try:
        state = read_state_dict(path)
    except CheckpointError as exc:
        text = str(exc)
        raise CheckpointError(what + text[len("weights"):] if text.startswith("weights:") else
                              f"{what}: {text}") from None
    return path, state if names is None else align_prefix(state, names)
