"""Compare two run folders cell by cell (masks, per-example predictions, metrics, per-head scores) and list each
cell's wall seconds in both; prints Markdown. Usage: python compare.py SERIAL_DIR PARALLEL_DIR"""
import sys

import numpy as np

from headprune_bench.benchmark.store.jsonl import RecordStore


def main(a_dir: str, b_dir: str) -> None:
    a = {r["cell"]: r for r in RecordStore(a_dir).records()}
    b = {r["cell"]: r for r in RecordStore(b_dir).records()}
    print(f"cells: {len(a)} in {a_dir}, {len(b)} in {b_dir}, {len(set(a) & set(b))} in both\n")
    print("| task | method | condition | heads pruned | mask | predictions | metrics | scores max abs diff "
          "| wall s (first) | wall s (second) |")
    print("|---|---|---|---:|---|---|---|---:|---:|---:|")
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if x["scores"] is None or y["scores"] is None:
            diff = "-" if x["scores"] is None and y["scores"] is None else "one missing"
        else:
            diff = f"{np.max(np.abs(np.asarray(x['scores'], float) - np.asarray(y['scores'], float))):.2e}"
        def same(f, x=x, y=y):
            return "equal" if x[f] == y[f] else "DIFFERENT"

        print(f"| {x['task']} | {x['method']} | {x['condition']} | {x['heads_pruned']} | {same('mask')} "
              f"| {same('predictions')} | {same('metrics')} | {diff} | {x['cost']['wall_s']:.1f} "
              f"| {y['cost']['wall_s']:.1f} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
