"""``per_head=True`` on ``torch.nn.MultiheadAttention`` (which never calls its output projection as a
module): per-head rates against an independent float64 computation of each head's attention output,
in situ and in the paper's decomposition, with masks, inside a wrapper module, in training mode
(dropout draws unchanged) and compiled."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import vitplast_kernels as vk

D, H, DEPTH, VOCAB = 24, 4, 2, 50
RTOL = 2e-5  # float32 forward against the float64 reference


class SelfAttention(nn.Module):
    """A wrapper holding the nn.MultiheadAttention (the MHA component is the wrapper)."""

    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        self.mha = mha

    def forward(self, h, key_padding_mask=None):
        return self.mha(h, h, h, need_weights=False, key_padding_mask=key_padding_mask)[0]


class Block(nn.Module):
    def __init__(self, dropout: float = 0.0, wrapped: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(D)
        mha = nn.MultiheadAttention(D, H, dropout=dropout, batch_first=True)
        self.attn = SelfAttention(mha) if wrapped else mha
        self.fc = nn.Linear(D, D)

    @property
    def mha(self) -> nn.MultiheadAttention:
        return self.attn.mha if isinstance(self.attn, SelfAttention) else self.attn

    def forward(self, x, mask=None):
        h = self.norm(x)
        if isinstance(self.attn, SelfAttention):
            x = x + self.attn(h, key_padding_mask=mask)
        else:
            x = x + self.attn(h, h, h, need_weights=False, key_padding_mask=mask)[0]
        return x + self.fc(x)


class Net(nn.Module):
    def __init__(self, **block) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block(**block) for _ in range(DEPTH))

    def forward(self, ids, mask=None):
        x = self.embedding(ids)
        for b in self.blocks:
            x = b(x, mask)
        return x.mean(1)


COMPONENTS = {"LN1": "blocks.*.norm", "MHA": "blocks.*.attn", "FC1": "blocks.*.fc"}


def reference_heads(mha: nn.MultiheadAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``(N, L, H, dh)`` float64 per-head attention outputs of ``x`` ``(N, L, E)``, written out."""
    x = x.double()
    w, b = mha.in_proj_weight.double(), mha.in_proj_bias.double()
    q, k, v = (x @ w[i * D:(i + 1) * D].T + b[i * D:(i + 1) * D] for i in range(3))
    q, k, v = (t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v))  # (N, H, L, dh)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D // H)
    if mask is not None:
        scores = scores.masked_fill(mask[:, None, None, :], float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)  # (N, L, H, dh)


def head_rates(heads: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``(H,)`` mean over halves pairs of ``||o_h(x_i) - o_h(x_{i+B})|| / ||x_i - x_{i+B}||``."""
    B = x.shape[0] // 2
    num = (heads[:B] - heads[B:]).pow(2).sum((1, 3))  # (B, H)
    den = (x[:B].double() - x[B:].double()).pow(2).sum((1, 2))  # (B,)
    return (num / den[:, None]).sqrt().mean(0)


def _inputs(gen, n=8, length=7):
    ids = torch.randint(0, VOCAB, (n, length), generator=gen)
    mask = torch.zeros(n, length, dtype=torch.bool)
    mask[::3, -2:] = True  # some sequences end in padding
    return ids, mask


def _mha_inputs(net: Net, ids, mask) -> list[torch.Tensor]:
    """The input of every block's attention (after its LayerNorm), by plain hooks."""
    seen = []
    hooks = [b.mha.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach())) for b in net.blocks]
    with torch.no_grad():
        net(ids, mask)
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("wrapped", [False, True], ids=["mha", "inside-a-wrapper"])
def test_in_situ_per_head_matches_float64(gen, wrapped):
    torch.manual_seed(0)
    net = Net(wrapped=wrapped).eval()
    ids, mask = _inputs(gen)
    with vk.capture(net, components=COMPONENTS, per_head=True) as acts, torch.no_grad():
        net(ids, mask)
    got = vk.pairwise_plasticity(acts).head_mean()
    assert got.shape == (DEPTH, H)
    for layer, (block, x) in enumerate(zip(net.blocks, _mha_inputs(net, ids, mask), strict=True)):
        want = head_rates(reference_heads(block.mha, x, mask), x)
        torch.testing.assert_close(got[layer], want, rtol=RTOL, atol=0)


def test_decomposition_per_head_matches_float64(gen):
    """The paper's protocol: every attention applied to e, the embedding output."""
    torch.manual_seed(1)
    net = Net().eval()
    ids, _ = _inputs(gen)
    with vk.capture(net, components=COMPONENTS, embedding="embedding", protocol="decomposition",
                    per_head=True) as acts, torch.no_grad():
        net(ids)
    got = vk.pairwise_plasticity(acts).head_mean()
    e = net.embedding(ids).detach()
    for layer, block in enumerate(net.blocks):
        torch.testing.assert_close(got[layer], head_rates(reference_heads(block.mha, e, None), e),
                                   rtol=RTOL, atol=0)


def test_training_forward_draws_the_same_dropout(gen):
    """The recomputation runs without dropout and draws no random numbers: the training forward's
    output (its dropout masks) is the one it gives without the capture."""
    torch.manual_seed(2)
    net = Net(dropout=0.5).train()
    ids, mask = _inputs(gen)
    torch.manual_seed(3)
    plain = net(ids, mask)
    with vk.capture(net, components=COMPONENTS, per_head=True) as acts:
        torch.manual_seed(3)
        measured = net(ids, mask)
    assert torch.equal(plain, measured)
    assert torch.isfinite(vk.pairwise_plasticity(acts).head_mean()).all()


def test_batch_first_false_is_refused():
    net = Net()
    net.blocks[0].attn.batch_first = False
    with pytest.raises(ValueError, match=r"blocks\.0\.attn is an nn\.MultiheadAttention with batch_first=F"):
        vk.capture(net, components=COMPONENTS, per_head=True)


def test_compiled_per_head_equals_eager(gen):
    torch.manual_seed(4)
    net = Net().eval()
    ids, mask = _inputs(gen)
    with vk.capture(net, components=COMPONENTS, per_head=True) as acts, torch.no_grad():
        net(ids, mask)
    eager = vk.pairwise_plasticity(acts).head_mean()
    torch._dynamo.reset()
    try:
        with vk.capture(net, components=COMPONENTS, per_head=True) as acts, torch.no_grad():
            torch.compile(net, backend="eager", fullgraph=True)(ids, mask)
        compiled = vk.pairwise_plasticity(acts).head_mean()
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=0)
