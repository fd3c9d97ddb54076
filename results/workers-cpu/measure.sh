#!/usr/bin/env bash
# Serial vs --workers 2 on this machine, one after the other, nothing else running: the quick preset, MRPC and
# RTE, seed 0, every method (`--methods all`). Writes serial/ and workers2/ (run folders) and timing.json here.
set -uo pipefail
cd "$(dirname "$0")/../.."
HERE=results/workers-cpu
export GLUE_DIR=${GLUE_DIR:-../shared/data/glue}
ARGS=(--methods all --tasks mrpc,rte --seeds 1 --preset quick --no-progress --no-report)
run() {  # run NAME EXTRA...: one timed bench run into $HERE/NAME
  local name=$1; shift
  local t0 t1; t0=$(date +%s.%N)
  bench run "${ARGS[@]}" --out "$HERE/$name" "$@" > "$HERE/$name.log" 2>&1
  local rc=$?; t1=$(date +%s.%N)
  python -c "print(f'\"$name\": {{\"rc\": $rc, \"wall_s\": {$t1 - $t0:.1f}}}')"
}
{
  echo "{"
  echo "\"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p')\", \"cores\": $(nproc),"
  echo "\"git_commit\": \"$(git rev-parse HEAD)\","
  echo "\"versions\": \"$(python -c 'import torch, ray, transformers; print(f"torch {torch.__version__}, ray {ray.__version__}, transformers {transformers.__version__}")')\","
  run serial; echo ","
  run workers2 --workers 2
  echo "}"
} > "$HERE/timing.json"
cat "$HERE/timing.json"
