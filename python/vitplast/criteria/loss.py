"""What the loss-based criteria share: their base (`LossCriterion`), the logits of a model's output, the
cross-entropy of a batch, and gradients limited to the units' parameters."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .base import Cost, Criterion, Setting


class LossCriterion(Criterion):
    """A criterion read from the cross-entropy's gradients at the labelled batches: it needs images,
    labels and a backward pass, depends on the head each seed initialises (scored per seed), and its
    scores are norms or squares, >= 0."""

    needs = frozenset({"images", "labels", "backward"})
    per_seed = True
    value_range = (0.0, math.inf)


def logits(out) -> torch.Tensor:
    """The class logits of a model's output: the tensor itself, a transformers output's ``logits``, or
    the first element of a tuple (timm's distilled models in train mode)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (tuple, list)):
        return out[0]
    raise TypeError(f"cannot read logits from a model output of type {type(out).__name__}")


@contextlib.contextmanager
def gradients_only_for(net: torch.nn.Module, names: set[str]):
    """Inside: only the parameters named in ``names`` require gradients (the others' are not computed),
    every gradient cleared; restored on exit. The model is put in eval mode (no dropout: the gradient at
    the pretrained weights, deterministic) and put back."""
    saved = {n: p.requires_grad for n, p in net.named_parameters()}
    was_training = net.training
    try:
        for n, p in net.named_parameters():
            p.requires_grad_(n in names)
            p.grad = None
        net.eval()
        yield
    finally:
        for n, p in net.named_parameters():
            p.requires_grad_(saved[n])
            p.grad = None
        net.train(was_training)


def cross_entropy_backwards(net: torch.nn.Module, setting: Setting, cost: Cost, name: str, *,
                            mean: bool = False, input_grad: bool = False,
                            after: Callable[[], None] = lambda: None) -> None:
    """Per labelled batch of ``setting``: one forward (under its autocast) and one backward of the
    cross-entropy summed over the batch's samples (``mean``: divided by the samples of every batch), both
    counted in ``cost``; with ``input_grad`` the images require a gradient; ``after()`` runs after each
    backward. ValueError naming criterion ``name`` when there is no labelled sample."""
    total = sum(int(b.images.shape[0]) for b in setting.batches)
    if total == 0:
        raise ValueError(f"{name}: no labelled criterion batch (--criterion-batches)")
    for batch in setting.batches:
        x = batch.images.to(setting.device)
        if input_grad:
            x = x.detach().requires_grad_(True)
        with setting.autocast():
            out = logits(net(x))
        loss = F.cross_entropy(out.float(), batch.labels.to(setting.device), reduction="sum")
        (loss / total if mean else loss).backward()
        after()
        del x, out, loss
        cost.forwards += 1
        cost.backwards += 1
