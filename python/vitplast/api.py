"""The Python API's own function: `score` any ``nn.Module`` on your own images. With it at the
package's face: ``vitplast.measure(...)`` (`vitplast.measure.measure_scores`), ``vitplast.finetune(...)``
(`vitplast.finetune.finetune`) and ``vitplast.claim(...)`` (`vitplast.claim.claim`), each returning its
typed result; the command line parses its options, calls one of them and prints.

    import timm, torch, vitplast

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10)
    images, labels = torch.randn(8, 3, 224, 224), torch.randint(0, 10, (8,))
    frame = vitplast.score(model, images, labels, criteria=["rgn", "size"]).to_dataframe()
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch

from .criteria import Batch, Scores, ScoringRequest, resolve_units, score_criteria
from .criteria.registry import get_criterion

__all__ = ["score"]


def score(model: torch.nn.Module, images: torch.Tensor | Iterable, labels: torch.Tensor | None = None,
          criteria: Sequence[str] = ("plasticity",), *, components: Mapping[str, str] | None = None,
          batch_size: int = 32, seeds: Sequence[int] = (0,), device: str | torch.device | None = None,
          protocol: str = "in_situ", pairs: str = "halves", progress: bool = False) -> Scores:
    """Score every (component, layer) unit of ``model`` with ``criteria`` (higher = finetune first).

    Args:
        model: any ``torch.nn.Module`` whose components a preset knows (timm and transformers ViTs,
            the digits ViT), or named by ``components``.
        images: an ``(N, C, H, W)`` tensor, or an iterable (a ``DataLoader``) of image tensors or of
            ``(images, labels)`` pairs.
        labels: ``(N,)`` class indices for the criteria that read labels (``rgn``, ``fisher``); with a
            loader of pairs, its labels.
        criteria: names from `vitplast.criteria.CRITERIA` (plasticity, rgn, fisher, cka, spectral,
            size).
        components: ``{label: glob}`` over module names (``'*'`` the layer index); default: the model's
            preset.
        batch_size: images per batch when ``images`` is one tensor. Plasticity pairs image ``i`` with
            ``i + B/2`` of each batch (``pairs="halves"``) or every distinct pair (``pairs="all"``).
        seeds: the seeds of the loss-based criteria (the model is yours: the same for every seed).
        device: where to score (default: where the model's parameters are).
        protocol: plasticity's capture protocol, ``in_situ`` or ``decomposition``.
        progress: draw progress bars.

    Returns:
        `vitplast.criteria.Scores`: a mapping of each criterion's ``CriterionResult``;
        ``.to_dataframe()`` gives the columns criterion, component, layer, value.
    """
    names = tuple(dict.fromkeys(criteria))
    chosen = [get_criterion(n) for n in names]  # ValueError naming the known ones
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    batches = _batches(images, labels, batch_size, device)
    if not batches:
        raise ValueError("score: no images given")
    needing = [c.name for c in chosen if "labels" in c.needs]
    if needing and any(b.labels is None for b in batches):
        raise ValueError(f"score: {', '.join(needing)} read labels; pass labels= (or a loader of "
                         "(images, labels))")
    was_training = model.training
    request = ScoringRequest(
        lambda seed: model, resolve_units(model, components), batches=batches,
        pair_batches=lambda: (b.images[: len(b.images) - len(b.images) % 2] for b in batches),
        seeds=tuple(seeds), components=components, device=device, progress=progress,
        options={"protocol": protocol, "pairs": pairs})
    try:
        return score_criteria(names, request, say=lambda text: None)
    finally:
        model.train(was_training)


def _batches(images, labels, batch_size: int, device) -> list[Batch]:
    """``images`` (and ``labels``) as `Batch`es on ``device``."""
    if isinstance(images, torch.Tensor):
        if images.dim() < 2:
            raise ValueError(f"score: images must be (N, C, H, W), got shape {tuple(images.shape)}")
        if labels is not None and len(labels) != len(images):
            raise ValueError(f"score: {len(labels)} labels for {len(images)} images")
        chunks = [(images[i:i + batch_size], None if labels is None else labels[i:i + batch_size])
                  for i in range(0, len(images), batch_size)]
    else:
        chunks = [tuple(item) if isinstance(item, (tuple, list)) else (item, None) for item in images]
    return [Batch(x.to(device), None if y is None else y.to(device)) for x, y, *_ in chunks]
