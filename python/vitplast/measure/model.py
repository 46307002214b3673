"""The capture of the model ``vitplast measure`` measures (presets, or ``--component``/``--embedding``
for any model); the model itself comes from :mod:`vitplast.models.builder`."""

from __future__ import annotations


def make_capture(net, model_name: str, *, protocol: str, pairs: str, components, embedding):
    """The (not yet attached) capture of ``net``: raises ValueError when its components or embedding
    cannot be found, with the options that name them."""
    import vitplast_kernels

    try:
        return vitplast_kernels.capture(net, protocol=protocol, pairs=pairs, components=components,
                                        embedding=embedding)
    except ValueError as exc:
        if components is not None or "no component found" not in str(exc):
            raise
        names = [n for n, _ in net.named_modules() if n][:8]
        raise ValueError(
            f"{model_name}: no preset knows its components ({type(net).__name__}); name them with "
            f"--component LABEL=GLOB (repeatable; python: components={{label: glob}}), globs over module "
            f"names such as {names}, '*' standing for the layer index, and for --protocol decomposition "
            f"--embedding NAME"
        ) from None
