"""Models by the names their users type: what a name names (`.sources`), the one builder (the
embedded digits ViT, timm names with tags and hf-hub:, transformers models by hf:ID_OR_DIR), checkpoints
read weights-only, the Hugging Face cache, the component maps of Hugging Face models."""
