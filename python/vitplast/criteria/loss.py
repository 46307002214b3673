"""What the loss-based criteria share: the logits of a model's output, the cross-entropy of a batch,
and gradients limited to the units' parameters."""

from __future__ import annotations

import contextlib

import torch


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
