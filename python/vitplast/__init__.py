"""Applications built on vitplast_kernels: the `vitplast` CLI, measurement, finetuning, profiling."""
