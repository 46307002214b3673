"""Per-head outputs of ``torch.nn.MultiheadAttention``, which never calls its output projection as a
module (it passes ``out_proj.weight`` to ``F.multi_head_attention_forward``), so no hook can see the
concatenated heads that projection reads.

`head_outputs` recomputes them from the call's own arguments: ``F.multi_head_attention_forward``
with the module's input projections, biases and masks, the identity as output projection,
``need_weights=False`` and dropout off (``training=False``: the recomputation draws no random numbers,
so the real forward's dropout masks are unchanged; the per-head values are those of attention without
dropout). One more attention computation per measured call, under ``torch.no_grad``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# nn.MultiheadAttention.forward's parameters, in order
_PARAMS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask", "average_attn_weights",
           "is_causal")


def check_batch_first(module: torch.nn.MultiheadAttention, name: str) -> None:
    """ValueError unless ``module`` takes ``(N, L, E)`` inputs: the capture pairs sequences along dim 0."""
    if not module.batch_first:
        raise ValueError(
            f"per_head=True: {name} is an nn.MultiheadAttention with batch_first=False, whose inputs are "
            "(L, N, E), tokens first; the capture pairs sequences along dim 0: build it with "
            "batch_first=True")


def head_outputs(module: torch.nn.MultiheadAttention, args: tuple, kwargs: dict) -> torch.Tensor:
    """``(N, L, E)``: the heads' outputs, concatenated (what ``out_proj`` reads), of the call
    ``module(*args, **kwargs)`` of a ``batch_first`` module."""
    call = dict(zip(_PARAMS, args, strict=False))
    call.update(kwargs)
    query, key, value = call["query"], call["key"], call["value"]
    if query.dim() != 3:
        raise ValueError(f"per_head=True: nn.MultiheadAttention input must be (N, L, E), got shape "
                         f"{tuple(query.shape)}")
    q, k, v = (t.transpose(0, 1) for t in (query, key, value))
    eye = torch.eye(module.embed_dim, dtype=q.dtype, device=q.device)
    separate = not module._qkv_same_embed_dim
    with torch.no_grad():
        out, _ = F.multi_head_attention_forward(
            q, k, v, module.embed_dim, module.num_heads, module.in_proj_weight, module.in_proj_bias,
            module.bias_k, module.bias_v, module.add_zero_attn, 0.0, eye, None, training=False,
            key_padding_mask=call.get("key_padding_mask"), need_weights=False,
            attn_mask=call.get("attn_mask"), use_separate_proj_weight=separate,
            q_proj_weight=module.q_proj_weight if separate else None,
            k_proj_weight=module.k_proj_weight if separate else None,
            v_proj_weight=module.v_proj_weight if separate else None,
            is_causal=bool(call.get("is_causal", False)))
    return out.transpose(0, 1)
