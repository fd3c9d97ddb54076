"""The cost ratios `bench run` ships for its expected time (benchmark/execution/cost_ratios.json), from committed runs.

    python scripts/cost_ratios.py --preset quick results/quick-protocol2 [FOLDER ...]

For every record of the folders, the seconds of its prune step and of the rest of the cell (recovery, evaluation;
headprune_bench.benchmark.execution.time_limit.cost_parts) are divided by the seconds of the base fine-tune of its
own (task, seed) in the same folder (base/<task>-seed<N>/train_info.json; records without one are left out). The
file keeps, per preset, the median of each kind, over all tasks and per task: prune steps by method (a sweep level
that derived its mask from another level's scores is left out), the rest by method and condition. A run on that
preset estimates a cell of a kind its folder has not recorded as ratio x the task's base fine-tune on its machine
(docs/choices.md).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from headprune_bench.benchmark.execution.eta import RATIOS_FILE
from headprune_bench.benchmark.execution.time_limit import cost_parts
from headprune_bench.benchmark.store.folder import base_train_infos
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.benchmark.store.records import PRUNE_ONLY


def samples(folder: Path, task: str | None = None) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """(prune ratios by method, rest ratios by method|condition, records used) of one run folder (of ``task``'s
    records only, when given)."""
    bases = {key: info["wall_s"] for key, info in base_train_infos(folder / "base").items()
             if isinstance(info.get("wall_s"), (int, float)) and info["wall_s"] > 0}
    prune: dict[str, list[float]] = {}
    rest: dict[str, list[float]] = {}
    own_steps: dict[str, float | None] = {}
    used = 0
    for record in sorted(RecordStore(folder).records(), key=lambda r: r["condition"] != PRUNE_ONLY):
        pruned, prune_s, rest_s = cost_parts(record, own_steps)
        base = bases.get((record["task"], record["seed"]))
        if base is None or task not in (None, record["task"]):
            continue
        used += 1
        if pruned and not (record.get("trace") or {}).get("score_pass"):
            prune.setdefault(record["method"], []).append(prune_s / base)
        rest.setdefault(f"{record['method']}|{record['condition']}", []).append(rest_s / base)
    return prune, rest, used


def medians(folders: list[Path], task: str | None = None) -> tuple[dict[str, Any], int]:
    """The medians of :func:`samples` over ``folders``: ``{"prune": ..., "rest": ...}``, and the records used."""
    prune: dict[str, list[float]] = {}
    rest: dict[str, list[float]] = {}
    used = 0
    for folder in folders:
        p, r, n = samples(folder, task)
        used += n
        for table, part in ((prune, p), (rest, r)):
            for key, values in part.items():
                table.setdefault(key, []).extend(values)
    return {"prune": {k: round(statistics.median(v), 5) for k, v in sorted(prune.items())},
            "rest": {k: round(statistics.median(v), 5) for k, v in sorted(rest.items())}}, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True, help="the preset the folders ran (their ratios hold for it)")
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=RATIOS_FILE)
    args = parser.parse_args()
    pooled, used = medians(args.folders)
    tasks = sorted({r["task"] for folder in args.folders for r in RecordStore(folder, read_only=True).records()})
    data = json.loads(args.out.read_text()) if args.out.exists() else {"presets": {}}
    data["presets"][args.preset] = {
        "source": f"python scripts/cost_ratios.py --preset {args.preset} " + " ".join(map(str, args.folders))
                  + f" ({used} records)",
        **pooled,
        "tasks": {task: medians(args.folders, task)[0] for task in tasks},
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: preset {args.preset}, {used} records, tasks {', '.join(tasks)}")


if __name__ == "__main__":
    main()
