"""Tools beside the benchmark: export of a pruned model, latency and throughput, AUBER's search speed."""
