"""Issue 43's cost estimate, from this folder's own records: the thread-seconds of the curve cells still to run.

For each (task, method, condition) of the curve plan (levels 0.1, 0.5, 0.7, 0.9 next to the recorded 0.3, every
fixed-count method; prune-only at every level, prune+recover at 0.5 and 0.7), the median recorded wall time of that
kind of cell times the cells of that kind without a record. A method that ranks once (random, confidence, Michel)
derives its mask at a new level from its 0.3 scores, so its new prune-only cells cost what its derived cells
recorded so far cost (else an evaluation: the original model's prune-only cell). A seed with a cell still to run and
no base model under base/ costs the median recorded base fine-tune of its task. A kind of cell without any record
is listed, not guessed.

    python results/quick-protocol2/estimate_curves.py [DIR]
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

TASKS, SEEDS = ("mrpc", "rte"), range(10)
METHODS = ("random", "confidence", "michel", "voita", "dsp", "redundancy", "kwon")
RANKS_ONCE = {"random", "confidence", "michel"}
NEW_LEVELS = ("fraction:0.1", "fraction:0.5", "fraction:0.7", "fraction:0.9")
RECOVER_LEVELS = ("fraction:0.5", "fraction:0.7")


def main(folder: Path) -> None:
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines() if line.strip()]
    done = {(r["task"], r["seed"], r["method"], r["budget"]["spec"], r["condition"]) for r in records}
    walls: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        derived = bool((r.get("trace") or {}).get("score_pass"))
        kind = "derived" if derived else r["budget"]["spec"] == "fraction:0.3" and "at0.3"
        if kind:
            walls[(r["task"], r["method"], r["condition"], kind)].append(r["cost"]["wall_s"])
    bases = defaultdict(list)
    for info in folder.glob("base/*/train_info.json"):
        task = info.parent.name.split("-seed")[0]
        bases[task].append(json.loads(info.read_text())["wall_s"])

    total, unknown, lines = 0.0, set(), []
    for task in TASKS:
        pending = {s for s in SEEDS for method in METHODS
                   for condition, levels in (("prune-only", NEW_LEVELS), ("prune+recover", RECOVER_LEVELS))
                   for lv in levels if (task, s, method, lv, condition) not in done}
        missing = [s for s in sorted(pending) if not (folder / "base" / f"{task}-seed{s}" / "config.json").exists()]
        cost = statistics.median(bases[task]) * len(missing)
        total += cost
        lines.append(f"{task}: {len(missing)} base fine-tunes to redo x median {statistics.median(bases[task]):.0f} s "
                     f"= {cost:.0f} s")
        for method in METHODS:
            for condition, levels in (("prune-only", NEW_LEVELS), ("prune+recover", RECOVER_LEVELS)):
                todo = [(s, lv) for s in SEEDS for lv in levels if (task, s, method, lv, condition) not in done]
                if not todo:
                    continue
                kind = "derived" if method in RANKS_ONCE and condition == "prune-only" else "at0.3"
                sample = walls.get((task, method, condition, kind))
                if not sample and kind == "derived":
                    sample = walls.get((task, "original", "prune-only", "at0.3")) or [
                        r["cost"]["wall_s"] for r in records if r["task"] == task and r["method"] == "original"
                        and r["condition"] == "prune-only"]
                if not sample:
                    unknown.add(f"{task} {method} {condition} ({len(todo)} cells)")
                    continue
                cost = statistics.median(sample) * len(todo)
                total += cost
                median = statistics.median(sample)
                lines.append(f"{task} {method} {condition}: {len(todo)} cells x median {median:.1f} s = {cost:.0f} s")
    print("\n".join(lines))
    print(f"total: {total:.0f} thread-seconds = {total / 3600:.1f} thread-hours = {total / 7200:.1f} h of wall clock "
          f"on 2 workers")
    if unknown:
        print("not estimated (no record of that kind yet): " + "; ".join(sorted(unknown)))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
