"""Component mappings for Hugging Face transformers models.

A mapping is ``{label: module-name glob}`` for ``vitplast_kernels.capture(model, components=...,
embedding=...)``; ``*`` stands for the layer index.

BERT-style encoders (BERT, MiniLM, RoBERTa's ``encoder.layer.N`` layout) are **post-norm**:

    h   = LN1(x + W_O · MHA(x))        attention.self -> attention.output.dense -> attention.output.LayerNorm
    out = LN2(h + FC2(act(FC1(h))))    intermediate.dense -> output.dense -> output.LayerNorm

so the forward order within a layer is MHA, LN1, FC1, FC2, LN2, and each LayerNorm sees the residual
sum. ``MHA`` is ``attention.self``: the multi-head attention up to the concatenated heads (its output is
a tuple ``(context, weights)``; the context is measured); the output projection ``W_O`` sits in
``attention.output.dense`` and is not a separate component. The embedding (for the decomposition
protocol) is ``embeddings`` (token + position + type embeddings, then LayerNorm).

``vitplast_kernels.measure.presets`` also has an ``hf-bert`` preset (picked automatically by ``capture``)
whose MHA is the whole ``attention`` block (self-attention + ``W_O`` + residual + LayerNorm LN1): use
``BERT_COMPONENTS`` to measure the attention alone, the preset to measure the whole sub-layer.
"""

from __future__ import annotations

BERT_COMPONENTS: dict[str, str] = {
    "MHA": "encoder.layer.*.attention.self",
    "LN1": "encoder.layer.*.attention.output.LayerNorm",
    "FC1": "encoder.layer.*.intermediate.dense",
    "FC2": "encoder.layer.*.output.dense",
    "LN2": "encoder.layer.*.output.LayerNorm",
}
BERT_EMBEDDING = "embeddings"
