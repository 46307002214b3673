"""Image datasets from a one-string spec, and their loaders."""
