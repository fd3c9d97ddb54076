#!/bin/bash
# The speed measurement of results/speed-cpu (issue 14): every head count of results/quick at batch 1, and three
# counts (22 = fraction:0.3; 36 and 52, frequent AUBER counts) at batches 32 and 128. Run with nothing else on
# the machine; the timings are appended to results/quick/speed.jsonl.
set -e
cd "$(dirname "$0")/../.."
bench speed results/quick --batches 1 --lengths 64,128,512 --threads 2 --device cpu --rounds 5 --min-run-time 1.0
bench speed results/quick --batches 32,128 --lengths 64,128,512 --threads 2 --device cpu --heads-pruned 22,36,52 \
  --rounds 3 --min-run-time 1.0
