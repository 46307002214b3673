"""The Triton kernels (paired, all pairs) and their ``torch.library`` ops."""
