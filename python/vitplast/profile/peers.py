"""The peers ``vitplast profile`` compares a measurement with: what a user would write without the package.

- ``naive_hooks_fn``: forward hooks computing the paper's eager distance
  ``((x - y) ** 2).flatten(1).sum(-1).sqrt()`` of every component's input and output halves;
- ``paper_protocol``: the paper's protocol implemented naively: the tokens ``e`` entering the first
  block, for each half of the batch every component of every block applied to ``e`` (FC2 to ``e``
  zero-padded) and its output copied to the host, then per output both halves moved back to the device
  and the eager distance taken. With ``blocks=1`` only block 0 runs and the per-block part is scaled
  by the depth (an estimate, flagged in the result);
- ``paper_host_bytes``: host memory the paper's protocol needs for one batch (every component output of
  every block, both halves, in the activations' dtype).

These are deliberately the straightforward implementations (the package's own decomposition protocol
is ``vitplast_kernels.capture(protocol="decomposition")``); tests check that both give the same rates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from vitplast_kernels import timing
from vitplast_kernels.measure import presets

from .profiler import Structure, first_tensor, forward_with_hooks


def eager_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The paper's formula: ``(B, ...) x (B, ...) -> (B,)`` distances in the inputs' dtype."""
    return ((x - y) ** 2).flatten(1).sum(-1).sqrt()


# --- naive hooks ------------------------------------------------------------------------------
def naive_hooks_fn(model: nn.Module, images: torch.Tensor, st: Structure) -> Callable[[], Any]:
    """One forward with forward hooks computing eager distance ratios of every component's input/output
    halves (one ``(B,)`` tensor per component call, left on the device); returns their means."""

    def run():
        rates: list[torch.Tensor] = []

        def hook(_mod, args, output):
            y, b = first_tensor(output), args[0].shape[0] // 2
            rates.append(eager_distance(y[:b], y[b:]) / eager_distance(args[0][:b], args[0][b:]))

        forward_with_hooks(model, images, st, hook)
        return torch.stack([r.float().mean() for r in rates]).cpu()

    return run


# --- the paper's protocol ---------------------------------------------------------------------
class _StopForward(Exception):
    pass


def embedding_tokens(model: nn.Module, images: torch.Tensor, st: Structure) -> torch.Tensor:
    """``e``: what the decomposition's embedding spec names (the first block's input for timm), obtained
    by running the model only up to it."""
    name, _, which = st.embedding.partition(":")
    named = dict(model.named_modules())
    found = presets.match(name, named)
    if len(found) != 1:
        raise ValueError(f"embedding {st.embedding!r} must match one module, matched {len(found)}")
    module = named[next(iter(found.values()))]
    got: list[torch.Tensor] = []

    def stop(_m, args, output=None):  # a pre-hook is called without the output
        got.append(args[0] if which == "input" else first_tensor(output))
        raise _StopForward

    h = module.register_forward_pre_hook(stop) if which == "input" else module.register_forward_hook(stop)
    try:
        with contextlib.suppress(_StopForward), torch.no_grad():
            model(images)
    finally:
        h.remove()
    return got[0]


def decomposition_outputs(model: nn.Module, e: torch.Tensor, st: Structure,
                          layers: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Every component of ``layers`` applied to ``e``, each output copied to the host (as the paper),
    keyed ``"<layer>.<component>.<module name>"``."""
    named = dict(model.named_modules())
    host = {}
    with torch.no_grad():
        for lay in layers:
            for c in st.components:
                for n in st.modules[c].get(lay, ()):
                    mod, inp = named[n], e
                    width = getattr(mod, "in_features", 0) if c == "FC2" else 0
                    if width > e.shape[-1]:  # FC2 takes e zero-padded to its input width
                        inp = torch.cat([e, e.new_zeros(*e.shape[:-1], width - e.shape[-1])], dim=-1)
                    host[f"{lay}.{c}.{n}"] = first_tensor(mod(inp)).to("cpu", copy=True)
    return host


def paper_protocol(model: nn.Module, images: torch.Tensor, st: Structure, *, blocks: int | None = None
                   ) -> dict[str, Any]:
    """Runs the paper's protocol once on ``images`` (halves = the two batches); returns seconds.

    ``blocks=None``: every block (the real protocol). ``blocks=1``: block 0 only and the per-block
    seconds scaled by the depth: ``seconds`` is then an estimate (``estimated=True``). Timed on the
    host clock (``timing.time_once_ms(wall=True)``): the protocol's cost is its copies to the host.
    """
    device = images.device
    layers = st.layers if blocks is None else st.layers[:blocks]
    b = images.shape[0] // 2
    es: list[torch.Tensor] = []
    rates: list[torch.Tensor] = []

    def embed():
        es.extend(embedding_tokens(model, half, st) for half in (images[:b], images[b:]))

    def run_blocks():
        outs = [decomposition_outputs(model, e, st, layers) for e in es]
        d_in = eager_distance(es[0], es[1])
        for k in list(outs[0]):
            z1, z2 = outs[0].pop(k).to(device), outs[1].pop(k).to(device)
            rates.append((eager_distance(z1, z2) / d_in).cpu())

    t_embed = timing.time_once_ms(embed, device, wall=True) / 1e3
    t_blocks = timing.time_once_ms(run_blocks, device, wall=True) / 1e3
    scale = len(st.layers) / len(layers)
    return {"seconds": t_embed + t_blocks * scale, "estimated": scale != 1, "blocks_run": len(layers),
            "embed_s": t_embed, "blocks_s": t_blocks, "n_rates": len(rates)}


def paper_host_bytes(model: nn.Module, images: torch.Tensor, st: Structure) -> int:
    """Host bytes the paper's protocol holds for one batch: every component output of every block for
    both halves, in the outputs' dtype (from block 0's output shapes times the depth)."""
    b = images.shape[0] // 2
    sizes: list[int] = []
    forward_with_hooks(model, images, st, lambda _m, _a, o: sizes.append(first_tensor(o)[:b].nbytes),
                       st.layers[0])
    return 2 * sum(sizes) * len(st.layers)
