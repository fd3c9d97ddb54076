"""The benchmark runner, statistics and reports; the CLI is :mod:`headprune_bench.benchmark.cli` (``bench``)."""
