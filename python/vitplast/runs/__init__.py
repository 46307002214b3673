"""Run directories: config, metrics, checkpoints, locks, output sets, and the checks on --out."""
