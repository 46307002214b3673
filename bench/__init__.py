"""Benchmarks of the kernels and of whole measurements, run from the repository root as modules:
``python -m bench.compare [--device cpu|cuda] [--quick]`` (the table of ratios against every peer),
``python -m bench.gpu_paired``, ``python -m bench.all_pairs``, ``python -m bench.capture_overhead``, ...;
``pytest bench/ --benchmark-only`` runs the pytest-benchmark suites. Timing goes through
``vitplast_kernels.timing`` (via ``bench.harness``)."""
