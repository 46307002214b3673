"""Component mappings: which modules of a model are LN1, MHA, LN2, FC1, FC2, as module-name globs.

A mapping is ``{label: pattern}`` or ``{label: (pattern, pattern, ...)}`` (several modules whose outputs
together form the component, e.g. a SwiGLU's ``fc1_g`` and ``fc1_x``: the component is the stacked
linear map, its output distance sums over the parts; all parts share one input). Patterns match dotted
module names segment by segment:

- ``**`` is any number of whole segments (``**.blocks.*.attn`` matches ``blocks.3.attn`` and
  ``_orig_mod.blocks.3.attn``);
- ``*`` is one or more characters inside a segment; ``?`` one character and ``[...]`` one character of
  a set (``[0-5]``, ``[!0]``), as in `fnmatch`. None of them matches a ``.``.

The *layer* of a matched name is what the wildcards matched: each ``*`` of a segment holding only
``*`` wildcards gives its own part (``blocks.*.attn``: ``blocks.3.attn`` is layer ``3``), and a segment
holding ``?`` or ``[...]`` gives its whole text (``blocks.1?.attn``: ``blocks.12.attn`` is layer ``12``).

The embedding (the input ``e`` of the decomposition protocol) is a module name whose output is ``e``,
or ``"<name>:input"`` for a module's first input (``"**.blocks.0:input"``: the tokens entering the
first block, i.e. the output of timm's ``patch_drop``/``norm_pre``).

`detect` tries the presets below in order. A preset's leading ``**`` must stand for one prefix
shared by all its patterns (one transformer): the prefixes where every pattern matches are tried,
shortest first, so the ``blocks`` of a hybrid ViT's ResNet stem (``patch_embed.backbone.stages.0.
blocks.0.norm1``) do not collide with the transformer's own ``blocks.0.norm1``. The preset returned has
its ``**`` replaced by that prefix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import torch

COMPONENTS = ("LN1", "MHA", "LN2", "FC1", "FC2")

Pattern = str | tuple[str, ...]


@dataclass(frozen=True)
class Preset:
    """A named mapping; ``proj`` is the output projection inside the MHA module (per-head rates)."""

    name: str
    components: dict[str, Pattern]
    embedding: str
    proj: str | None = None
    description: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _pre_norm(prefix: str, ln1: str, attn: str, ln2: str, fc1: Pattern, fc2: str) -> dict[str, Pattern]:
    def p(x: Pattern) -> Pattern:
        return tuple(f"{prefix}.{s}" for s in x) if isinstance(x, tuple) else f"{prefix}.{x}"

    return {"LN1": p(ln1), "MHA": p(attn), "LN2": p(ln2), "FC1": p(fc1), "FC2": p(fc2)}


PRESETS: tuple[Preset, ...] = (
    Preset(
        "timm-vit",
        _pre_norm("**.blocks.*", "norm1", "attn", "norm2", "mlp.fc1", "mlp.fc2"),
        "**.blocks.0:input",
        proj="proj",
        description="timm VisionTransformer/DeiT/DINOv2 and Eva/DINOv3 blocks with an Mlp, GluMlp or "
        "SwiGLUPacked (fc1 -> act -> fc2); also hybrid ViTs (ResNet stem in patch_embed.backbone, whose "
        "own blocks sit at another prefix)",
    ),
    Preset(
        "timm-parallel",
        _pre_norm("**.blocks.*", "attns.*.norm", "attns.*.attn", "ffns.*.norm", "ffns.*.mlp.fc1",
                  "ffns.*.mlp.fc2"),
        "**.blocks.0:input",
        proj="proj",
        description="timm parallel-block ViTs (ParallelThingsBlock, vit_*_18x2_*: x + sum of attention "
        "branches, then x + sum of MLP branches). Every branch is measured as a layer of its own, "
        "labelled 'block.branch': LN1/MHA = attention branch b's norm and attention, LN2/FC1/FC2 = MLP "
        "branch b's norm and linears, each on its real input. Attention branch b and MLP branch b are "
        "not a sequential path (the block sums the branches); a layer pairs them by index only",
    ),
    Preset(
        "timm-swiglu",
        _pre_norm("**.blocks.*", "norm1", "attn", "norm2", ("mlp.fc1_g", "mlp.fc1_x"), "mlp.fc2"),
        "**.blocks.0:input",
        proj="proj",
        description="timm Eva/DINOv3 blocks with a SwiGLU (fc1_g, fc1_x -> fc2): FC1 = both gates",
    ),
    Preset(
        "dinov2-swiglu-w12",
        _pre_norm("**.blocks.*", "norm1", "attn", "norm2", "mlp.w12", "mlp.w3"),
        "**.blocks.0:input",
        proj="proj",
        description="DINOv2 reference blocks with a fused SwiGLU FFN (w12 -> w3)",
    ),
    Preset(
        "hf-vit",
        _pre_norm("**.encoder.layer.*", "layernorm_before", "attention", "layernorm_after",
                  "intermediate.dense", "output.dense"),
        "**.encoder.layer.0:input",
        proj="output.dense",
        description="HF transformers ViT/DeiT/BEiT-style pre-norm layers",
    ),
    Preset(
        "hf-vit-layers",
        _pre_norm("**.layers.*", "layernorm_before", "attention", "layernorm_after", "mlp.fc1", "mlp.fc2"),
        "**.layers.0:input",
        proj="o_proj",
        description="HF transformers ViT (v5 layout: layers.N.attention.o_proj, mlp.fc1/fc2)",
    ),
    Preset(
        "hf-bert",
        {
            "LN1": "**.encoder.layer.*.attention.output.LayerNorm",
            "MHA": "**.encoder.layer.*.attention",
            "LN2": "**.encoder.layer.*.output.LayerNorm",
            "FC1": "**.encoder.layer.*.intermediate.dense",
            "FC2": "**.encoder.layer.*.output.dense",
        },
        "**.encoder.layer.0:input",
        proj="output.dense",
        description="HF BERT-style post-norm layers (BERT, RoBERTa, MiniLM): MHA = the attention block "
        "(self-attention + output dense + residual LayerNorm), LN1/LN2 = the post-norm LayerNorms",
    ),
    Preset(
        "hf-gpt2",
        _pre_norm("**.h.*", "ln_1", "attn", "ln_2", "mlp.c_fc", "mlp.c_proj"),
        "**.h.0:input",
        proj="c_proj",
        description="HF GPT-2 blocks (Conv1D linears)",
    ),
)


def preset(name: str) -> Preset:
    for p in PRESETS:
        if p.name == name:
            return p
    raise ValueError(f"preset must be one of {tuple(p.name for p in PRESETS)}, got {name!r}")


def _segment_regex(seg: str, pattern: str) -> str:
    """The regex of one segment (not ``**``) with its capture groups (see the module docstring)."""
    if not seg:
        raise ValueError(f"pattern {pattern!r} has an empty segment (two dots in a row, or a dot at an end)")
    if "**" in seg:
        raise ValueError(f"pattern {pattern!r}: '**' must be a whole segment, got {seg!r}")
    whole = "?" in seg or "[" in seg  # the segment's whole text is one part of the layer key
    rx, i = "", 0
    while i < len(seg):
        ch = seg[i]
        if ch == "*":
            rx += "[^.]+" if whole else "([^.]+)"
        elif ch == "?":
            rx += "[^.]"
        elif ch == "[":
            j = i + 1
            if j < len(seg) and seg[j] in "!^":
                j += 1
            if j < len(seg) and seg[j] == "]":
                j += 1  # a ']' right after '[' or '[!' is a member, as in fnmatch
            close = seg.find("]", j)
            if close < 0:
                raise ValueError(f"pattern {pattern!r}: '[' without a closing ']' in segment {seg!r}")
            body = seg[i + 1 : close]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            body = body.replace("\\", "\\\\").replace("^", "\\^")
            rx += f"(?!\\.)[{'^' if negate else ''}{body}]"
            i = close
        else:
            rx += re.escape(ch)
        i += 1
    return f"({rx})" if whole else rx


def _compile(pattern: str) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"a pattern must be a non-empty module-name glob, got {pattern!r}")
    segs = pattern.split(".")
    if segs[-1] == "**":
        raise ValueError(f"pattern {pattern!r} must end with a module name, not '**'")
    rx = ""
    for i, seg in enumerate(segs):
        if seg == "**":
            rx += r"(?:[^.]+\.)*"  # zero or more whole segments
        else:
            rx += _segment_regex(seg, pattern) + (r"\." if i < len(segs) - 1 else "")
    return re.compile(rx + "$")


def check_pattern(pattern: str) -> None:
    """Raises ValueError when ``pattern`` is not a valid module-name glob."""
    _compile(pattern)


def match(pattern: str, names: Iterable[str]) -> dict[tuple[str, ...], str]:
    """``{layer key: module name}`` for the names matching ``pattern``; the key holds what the
    wildcards matched (see the module docstring). Raises ValueError when two names give the same key
    (ambiguous pattern)."""
    rx = _compile(pattern)
    found: dict[tuple[str, ...], str] = {}
    for name in names:
        m = rx.match(name)
        if m is None:
            continue
        key = m.groups()
        if key in found:
            raise ValueError(
                f"pattern {pattern!r} matches both {found[key]!r} and {name!r} for the same layer {key}: "
                "make it more specific"
            )
        found[key] = name
    return found


def layer_sort_key(key: tuple[str, ...]) -> tuple:
    return tuple((0, int(k), "") if k.isdigit() else (1, 0, k) for k in key)


def resolve(
    model: torch.nn.Module, components: Mapping[str, Pattern]
) -> tuple[list[tuple[str, ...]], dict[str, dict[tuple[str, ...], tuple[str, ...]]]]:
    """Matches a mapping against ``model``: (layer keys in block order, ``{label: {layer: module names}}``).

    Raises ValueError naming the label and pattern that match nothing.
    """
    names = [n for n, _ in model.named_modules() if n]
    out: dict[str, dict[tuple[str, ...], tuple[str, ...]]] = {}
    layers: set[tuple[str, ...]] = set()
    for label, pat in components.items():
        pats = (pat,) if isinstance(pat, str) else tuple(pat)
        if not pats:
            raise ValueError(f"components[{label!r}] holds no pattern")
        per_part = [match(p, names) for p in pats]
        for p, found in zip(pats, per_part, strict=True):
            if not found:
                raise ValueError(
                    f"components[{label!r}] pattern {p!r} matches no module of {type(model).__name__} "
                    f"(module names look like {names[:6]}...)"
                )
        keys = set(per_part[0])
        for p, found in zip(pats[1:], per_part[1:], strict=True):
            if set(found) != keys:
                raise ValueError(
                    f"components[{label!r}]: part {p!r} matches layers {sorted(found)} but {pats[0]!r} "
                    f"matches {sorted(keys)}"
                )
        out[label] = {k: tuple(found[k] for found in per_part) for k in keys}
        layers |= keys
    return sorted(layers, key=layer_sort_key), out


def _patterns(p: Preset) -> list[str]:
    return [s for v in p.components.values() for s in ((v,) if isinstance(v, str) else v)]


def _prefixes(pattern: str, names: list[str]) -> set[str]:
    """The prefixes a leading ``**.`` of ``pattern`` takes in the names it matches."""
    rx = re.compile(r"((?:[^.]+\.)*)" + _compile(pattern[3:]).pattern)
    return {m.group(1) for m in map(rx.match, names) if m is not None}


def _at(pattern: str, prefix: str) -> str:
    return prefix + pattern[3:] if pattern.startswith("**.") else pattern


def specialise(p: Preset, prefix: str) -> Preset:
    """``p`` with every leading ``**.`` replaced by ``prefix`` (``""`` or ``"a.b."``)."""
    comps = {c: (_at(v, prefix) if isinstance(v, str) else tuple(_at(x, prefix) for x in v))
             for c, v in p.components.items()}
    return replace(p, components=comps, embedding=_at(p.embedding, prefix))


def _fits(p: Preset, names: list[str]) -> bool:
    try:
        return all(match(s, names) for s in _patterns(p)) and bool(match(p.embedding.split(":")[0], names))
    except ValueError:  # ambiguous
        return False


def detect(model: torch.nn.Module) -> Preset:
    """The first preset whose every pattern (and its embedding) matches modules of ``model``, at one
    prefix shared by all its ``**`` patterns (see the module docstring); returned specialised to it."""
    names = [n for n, _ in model.named_modules() if n]
    many: list[str] = []
    for p in PRESETS:
        pats = _patterns(p) + [p.embedding.split(":")[0]]
        if not all(s.startswith("**.") for s in pats):
            if _fits(p, names):
                return p
            continue
        common = set.intersection(*(_prefixes(s, names) for s in pats))
        fits = [pre for pre in sorted(common) if _fits(specialise(p, pre), names)]
        if len(fits) == 1:
            return specialise(p, fits[0])
        if fits:
            many.append(f"{p.name} at prefixes {', '.join(repr(f) for f in fits)}")
    where = f" (several transformers: {'; '.join(many)}; pass components for one)" if many else ""
    raise ValueError(
        f"no component found: {type(model).__name__} matches none of the presets "
        f"{tuple(p.name for p in PRESETS)}{where}. Pass components={{'LN1': 'blocks.*.norm1', 'MHA': "
        "'blocks.*.attn', ...}} (module-name globs, * = the layer index) and, for "
        "protocol='decomposition', embedding='<module name>' or '<module name>:input'."
    )
