"""The one head finder: a model's classifier head(s), by module and by parameter name.

timm's ``get_classifier()`` first (a tuple of heads for distilled models), else a top-level module named
``head``, ``fc`` or ``classifier``. A head without parameters (``nn.Identity`` after
``reset_classifier(0)``) counts as none.
"""

from __future__ import annotations

from torch import nn

HEAD_ATTRS = ("head", "fc", "classifier")


def head_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``[(module name, module)]`` of the classifier head(s) that hold parameters (may be empty: an
    encoder such as ``BertModel`` has none)."""
    heads: list[nn.Module] = []
    get = getattr(model, "get_classifier", None)
    if callable(get):
        try:
            got = get()
        except Exception:  # a model whose get_classifier needs state it lacks
            got = None
        heads = [h for h in (got if isinstance(got, (tuple, list)) else [got]) if isinstance(h, nn.Module)]
    found = [(n, m) for n, m in model.named_modules() if n and any(m is h for h in heads)]
    if not found:
        found = [(n, getattr(model, n)) for n in HEAD_ATTRS if isinstance(getattr(model, n, None), nn.Module)]
    return [(n, m) for n, m in found if any(True for _ in m.parameters())]


def head_module(model: nn.Module) -> nn.Module:
    """The (first) classifier head; ValueError naming the model when it has none."""
    found = head_modules(model)
    if not found:
        raise ValueError(f"model {type(model).__name__} has no classifier head (get_classifier/head)")
    return found[0][1]


def head_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Parameter-name prefixes (``"head."``) of the classifier head(s)."""
    return tuple(f"{n}." for n, _ in head_modules(model))


def head_names(model: nn.Module) -> list[str]:
    """Names of the head(s)' parameters, in ``named_parameters`` order."""
    wanted = {id(p) for _, m in head_modules(model) for p in m.parameters()}
    return [n for n, p in model.named_parameters() if id(p) in wanted]
