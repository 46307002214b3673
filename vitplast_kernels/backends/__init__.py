"""Backends: the registry, the CPU (C++), CUDA (C++), Triton and PyTorch implementations, the
extension loader, and the choice of a backend for a call (`resolve`)."""

from .select import backend_names, resolve

__all__ = ["backend_names", "resolve"]
