"""``--train lora``: peft LoRA adapters on the linear layers of chosen components, the head kept trainable.

The adapted layers are those of the component map (a detected preset, or ``{LABEL: GLOB}``) that `.selection`
resolves: ``--lora-targets`` is a ``--train``-style spec (``"MHA@2-3+FC1"``), by default every layer's
attention (`LORA_DEFAULT`). peft is an optional dependency: ``pip install 'vitplast-kernels[lora]'``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import nn

from ..models.heads import head_module, head_modules, head_names
from .auto import choose_components, plasticity_means
from .selection import Globs, TrainPlan, labels, resolve_selection

LORA_DEFAULT = ("MHA",)  # what --train lora adapts without --lora-targets: every layer's attention


def import_peft():
    """The peft module; ImportError saying what to install when it is missing."""
    try:
        import peft
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("LoRA needs the optional dependency peft: pip install 'vitplast-kernels[lora]' (or "
                          "pip install peft)") from exc
    return peft


def lora_target_parts(spec: str | None, components: Mapping | None = None) -> tuple[str, ...]:
    """The parts ``--lora-targets`` names (``"MHA@2-3+FC1"`` -> ``("MHA@2-3", "FC1")``), or `LORA_DEFAULT` for
    None."""
    return LORA_DEFAULT if spec is None else TrainPlan.parse(spec, components).parts


def _lora_able(module: nn.Module) -> bool:
    """A linear map peft can wrap: ``nn.Linear`` or transformers' ``Conv1D`` (GPT-2)."""
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def lora_targets(model: nn.Module, train: str | Sequence[str] = "MHA", components: Globs = None) -> list[str]:
    """Qualified names of the linear layers inside the selected components' own modules (the same ownership as
    the parameters: a linear inside a nested component belongs to that one). LayerNorms have none; ValueError
    when the selection holds none."""
    sel = resolve_selection(model, train, components)
    owned = set(sel.names) - set(head_names(model))
    targets = [n for n, m in model.named_modules()
               if n and _lora_able(m) and any(f"{n}.{p}" in owned for p, _ in m.named_parameters())]
    if not targets:
        raise ValueError(f"--train {'+'.join(sel.spec)}: no LoRA-able linear layer in the selected "
                         "components (LayerNorms have none)")
    return targets


def lora_params_per_rank(model: nn.Module, components: Mapping | None = None, targets: str | None = None
                         ) -> int:
    """Trainable parameters that LoRA adds per unit of rank on ``targets`` (default: `LORA_DEFAULT`):
    ``in + out`` for each adapted linear layer (its ``A``, ``r x in``, and ``B``, ``out x r``; no bias),
    so that rank ``r`` adds exactly ``r`` times this many (the head, trainable too, aside)."""
    modules = dict(model.named_modules())
    return sum(sum(modules[name].weight.shape)
               for name in lora_targets(model, lora_target_parts(targets, components), components))


def _has_lora_target(model: nn.Module, component: str, components: Mapping | None = None) -> bool:
    try:
        return bool(lora_targets(model, (component,), components))
    except ValueError:
        return False


def lora_config(plasticity_or_components, model: nn.Module, *, budget: int | None = None, r: int = 8,
                alpha: int = 16, dropout: float = 0.0, components: Mapping | None = None):
    """A peft ``LoraConfig`` targeting the chosen components' linear layers, the head kept trainable.

    ``plasticity_or_components``: a PlasticityResult / ``{component: plasticity}`` mapping (the top components
    are chosen with `choose_components` and ``budget``), or a list of component names such as ``["MHA"]`` or
    ``["MHA@-2--1"]``. ``components``: the component map (``{label: glob}``; default: the model's preset).
    ValueError when the model has no classifier head.
    """
    peft = import_peft()
    if isinstance(plasticity_or_components, (list, tuple)):
        parts = [TrainPlan.parse(c, components).parts[0] for c in plasticity_or_components]
    else:
        means = plasticity_means(plasticity_or_components)
        lora_able = {c: v for c, v in means.items()
                     if c in labels(components) and _has_lora_target(model, c, components)}
        parts = choose_components(lora_able, model, budget, components=components)
    head_module(model)  # ValueError naming the model when it has no classifier head
    return peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                           target_modules=lora_targets(model, tuple(parts), components),
                           modules_to_save=[name for name, _ in head_modules(model)])


def apply_lora(model: nn.Module, config=None, *, r: int = 8, alpha: int = 16,
               components: Mapping | None = None, targets: str | None = None) -> nn.Module:
    """Wrap ``model`` with peft LoRA (default: ``targets``, a ``--train``-style spec such as
    ``"MHA@2-3+FC1"``, else the attention, component ``MHA`` of the map ``components`` or the preset: the
    ``--train lora`` baseline). Returns the peft model; only adapters and the head are trainable."""
    config = config or lora_config(list(lora_target_parts(targets, components)), model, r=r, alpha=alpha,
                                   components=components)
    return import_peft().get_peft_model(model, config)
