"""Models by name: the one builder (embedded digits ViT, timm), checkpoints read weights-only, the
component maps of Hugging Face models."""
