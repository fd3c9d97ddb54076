#!/usr/bin/env bash
# AUBER's sizing probe (issue 13: "AUBER sized so its count means something"): on MRPC seed 0 of the quick preset
# (the base model of results/workers-cpu/workers2, copied in, so no fine-tune is repeated), AUBER and its
# null-reward control auber-null (rewards from shuffled mini-dev labels) at
#   old/   the quick preset's sizing so far: 64-example mini-dev, per-layer fine-tune at lr 2e-6 (auber-null only:
#          AUBER itself at this sizing is in results/workers-cpu/workers2, 55 heads)
#   new/   a 256-example mini-dev (one example = 0.39 accuracy points, not 1.56) and the per-layer fine-tune at
#          lr 2e-5 (the official code's CLI default; the demo script's 2e-6 moves little in 16 steps)
# Prune-only cells (--no-recover): the count, the per-layer rewards and timings are what is measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=results/auber-sizing-mrpc
export GLUE_DIR=${GLUE_DIR:-../shared/data/glue}
for d in old new; do
  mkdir -p "$HERE/$d/base" && cp -rn results/workers-cpu/workers2/base/mrpc-seed0 "$HERE/$d/base/"
done
COMMON=(--tasks mrpc --seeds 1 --preset quick --no-recover --no-report --no-progress)
/usr/bin/time -f "new: %e s wall" bench run --methods auber,auber-null "${COMMON[@]}" --workers 2 --out "$HERE/new" \
  --option auber.minidev_max_examples=256 --option auber.layer_finetune_lr=2e-5 \
  --option auber-null.minidev_max_examples=256 --option auber-null.layer_finetune_lr=2e-5 > "$HERE/new.log" 2>&1
/usr/bin/time -f "old: %e s wall" bench run --methods auber-null "${COMMON[@]}" --out "$HERE/old" > "$HERE/old.log" 2>&1
