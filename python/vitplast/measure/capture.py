"""The capture ``vitplast measure`` attaches to its model: the presets, or the components and embedding
its options name (any model); the model itself comes from `vitplast.models.builder`."""

from __future__ import annotations

import vitplast_kernels

from .options import MeasureOptions


def make_capture(net, model_name: str, opts: MeasureOptions):
    """The (not yet attached) capture of ``net`` with the protocol, pairing, components and embedding of
    ``opts``: raises ValueError when its components or embedding cannot be found, naming the options
    that name them."""
    try:
        return vitplast_kernels.capture(net, protocol=opts.protocol, pairs=opts.pairs,
                                        components=opts.components, embedding=opts.embedding)
    except ValueError as exc:
        if opts.components is not None or "no component found" not in str(exc):
            raise
        names = [n for n, _ in net.named_modules() if n][:8]
        raise ValueError(
            f"{model_name}: no preset knows its components ({type(net).__name__}); name them with "
            f"--component LABEL=GLOB (repeatable; python: components={{label: glob}}), globs over module "
            f"names such as {names}, '*' standing for the layer index, and for --protocol decomposition "
            f"--embedding NAME"
        ) from None
