"""Where an AUBER cell's time goes, from the traces of committed records (issue 41, item 3).

    python results/auber-profile-cpu/split.py [results/quick-protocol2]

Per method (auber, auber-null) and task: the medians over seeds of the prune step's seconds and of its parts:
the layers' DQN searches (reward evaluations and the DQN), the per-layer fine-tunes, the final fine-tune, and the
rest; with the reward evaluations and seconds per evaluation. Records that carry ``reward_seconds`` (written since
2026-12-05) also split the search into rewards and the DQN loop.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results/quick-protocol2")
rows: dict[tuple[str, str], list[dict[str, float]]] = {}
for line in (folder / "records.jsonl").read_text().splitlines():
    r = json.loads(line)
    if r["method"] not in ("auber", "auber-null") or r["condition"] != "prune-only":
        continue
    layers, total = r["trace"]["layers"], r["cost"]["prune_wall_s"]
    part = {"total": total, "search": sum(x["search_seconds"] for x in layers),
            "layer_ft": sum(x["finetune_seconds"] for x in layers), "final_ft": r["trace"]["final_finetune"]["seconds"],
            "evals": sum(x["reward_evals"] for x in layers)}
    if all("reward_seconds" in x for x in layers):
        part["rewards"] = sum(x["reward_seconds"] for x in layers)
    part["rest"] = total - part["search"] - part["layer_ft"] - part["final_ft"]
    rows.setdefault((r["method"], r["task"]), []).append(part)

print(f"{folder}: medians over seeds (seconds of one thread; share of the prune step)")
print("| method | task | seeds | prune step s | DQN searches | per-layer fine-tunes | final fine-tune | rest | "
      "reward evals | s per eval (search / evals) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (method, task), parts in sorted(rows.items()):
    med = {k: statistics.median(p[k] for p in parts) for k in ("total", "search", "layer_ft", "final_ft", "rest",
                                                               "evals")}
    share = {k: 100 * med[k] / med["total"] for k in ("search", "layer_ft", "final_ft", "rest")}
    print(f"| {method} | {task} | {len(parts)} | {med['total']:.0f} | {med['search']:.0f} ({share['search']:.0f}%) | "
          f"{med['layer_ft']:.0f} ({share['layer_ft']:.0f}%) | {med['final_ft']:.0f} ({share['final_ft']:.0f}%) | "
          f"{med['rest']:.0f} ({share['rest']:.0f}%) | {med['evals']:.0f} | {med['search'] / med['evals']:.2f} |")
