"""fp32 against bf16, cell by cell, for issue 41's precision measurement (one MRPC seed, every method).

    cd results/precision-methods-cpu && python compare.py fp32 bf16

For each (method, level, condition) recorded in both folders: the wall-time ratio fp32 / bf16 of each phase (the
prune step, the recovery of a prune+recover cell, the dev evaluation of a prune-only cell), whether the masks are
equal (else how many heads differ), the heads pruned in each, how many dev predictions differ and the score in
each; then, per method, the ratio of all its cells' seconds together; then the base fine-tune's ratio (its
train_info.json) and the whole seed's.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from headprune_bench.benchmark.execution.time_limit import cost_parts


def records(folder: Path) -> dict[tuple[str, int, str, str, str], dict]:
    out = {}
    for line in (folder / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[(r["task"], r["seed"], r["method"], (r.get("budget") or {}).get("spec", "none"), r["condition"])] = r
    return out


def phases(r: dict, own_steps: dict) -> dict[str, float]:
    """Seconds of the cell's prune step (when it ran one: a cell that reused the prune-only cell's step copies its
    time, ``cost_parts`` tells them apart), and of its recovery (prune+recover) or its evaluation (any other)."""
    pruned, prune, rest = cost_parts(r, own_steps)
    other = {"recovery" if r["condition"] == "prune+recover" else "evaluation": rest}
    return {"prune step": prune, **other} if pruned else other


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def main() -> None:
    fp32_dir, bf16_dir = Path(sys.argv[1]), Path(sys.argv[2])
    a, b = records(fp32_dir), records(bf16_dir)
    print(f"fp32: {fp32_dir}  bf16: {bf16_dir}  (ratios: fp32 seconds / bf16 seconds)")
    print("| task | seed | method | level | condition | phase | fp32 s | bf16 s | ratio | masks | heads pruned | "
          "dev predictions differing | score fp32 / bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    totals = [0.0, 0.0]
    by_method: dict[str, list[float]] = {}
    steps_a: dict = {}
    steps_b: dict = {}
    for key in sorted(set(a) & set(b), key=lambda k: (k[4] != "prune-only", k)):
        ra, rb = a[key], b[key]
        ma, mb = ra["mask"], rb["mask"]
        diff = sum(x != y for row_a, row_b in zip(ma, mb) for x, y in zip(row_a, row_b))
        preds = sum(x != y for x, y in zip(ra["predictions"], rb["predictions"]))
        pa, pb = phases(ra, steps_a), phases(rb, steps_b)
        for phase in pa:
            totals[0] += pa[phase]
            totals[1] += pb.get(phase, 0.0)
            method = by_method.setdefault(key[2], [0.0, 0.0])
            method[0] += pa[phase]
            method[1] += pb.get(phase, 0.0)
            print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {phase} | {pa[phase]:.1f} | "
                  f"{pb.get(phase, 0.0):.1f} | {ratio(pa[phase], pb.get(phase, 0.0))} | "
                  f"{'equal' if diff == 0 else f'{diff} differ'} | {ra['heads_pruned']} / {rb['heads_pruned']} | "
                  f"{preds} of {len(ra['predictions'])} | {ra['score']:.4f} / {rb['score']:.4f} |")
    print("\n| method | cells | fp32 s | bf16 s | ratio |\n|---|---|---|---|---|")
    for name, (sa, sb) in sorted(by_method.items()):
        cells = sum(k[2] == name for k in set(a) & set(b))
        print(f"| {name} | {cells} | {sa:.0f} | {sb:.0f} | {ratio(sa, sb)} |")
    print()
    for task, seed in sorted({(k[0], k[1]) for k in set(a) & set(b)}):
        infos = [json.loads((d / "base" / f"{task}-seed{seed}" / "train_info.json").read_text())
                 for d in (fp32_dir, bf16_dir)]
        totals[0] += infos[0]["wall_s"]
        totals[1] += infos[1]["wall_s"]
        print(f"base fine-tune {task} seed {seed}: fp32 {infos[0]['wall_s']:.0f} s, bf16 {infos[1]['wall_s']:.0f} s, "
              f"ratio {ratio(infos[0]['wall_s'], infos[1]['wall_s'])}")
    print(f"all phases and base fine-tunes: fp32 {totals[0]:.0f} s, bf16 {totals[1]:.0f} s, ratio "
          f"{ratio(*totals)}")


if __name__ == "__main__":
    main()
