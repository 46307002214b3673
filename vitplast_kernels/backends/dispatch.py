"""Whether a paired call may skip the autograd dispatch: the one test, used by the op layer (which then
calls the backend below the autograd key) and by the Triton backend (which then calls its launchers
without going through its custom ops)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def without_autograd(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether a call on ``tensors`` needs no autograd: eager mode (a traced call records the op itself),
    and no gradient can flow (grad mode off, or no input requires one; capture detaches what it
    measures). The paired ops' autograd formulas are Python functions, so going through the autograd
    key only to redispatch below it costs a Python call per op, which adds up over a forward with many
    hooks."""
    if torch.compiler.is_compiling():
        return False
    return not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors)
