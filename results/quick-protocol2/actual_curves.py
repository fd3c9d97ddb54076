"""Issue 43's cost, estimated against spent: what the curve work after the estimate of a75e143 actually took.

The estimate (`estimate_curves.py` on the folder as committed at a75e143; its total, written down in SITTINGS.md, is
``ESTIMATE_S``) counted the curve cells still to run then and their base fine-tunes. This prints, from the folder's
own files:

- the thread-seconds of the curve plan's cells recorded since (records after the ones of a75e143; the plan of
  `estimate_curves.py`: levels 0.1, 0.5, 0.7, 0.9 prune-only and 0.5, 0.7 prune+recover, every fixed-count method),
  per condition, Voita's prune-only cells apart, and of Voita's own-fine-tuning evaluations at those levels (not in
  the estimate);
- the base fine-tunes since: every version of a `base/*/train_info.json` committed after a75e143, and the working
  tree's where it differs from HEAD (a sitting's refit not yet committed);
- the wall clock of the curve invocations since (`runs.jsonl` lines whose budget is not fraction:0.3 alone;
  `wallclock.py`'s lower bound), which leaves out issue 40's sittings whose base fine-tunes the curves reused;
- what bf16 would have taken: each method's thread-seconds per kind of cell (prune step and evaluation; evaluation
  alone where the mask came from stored scores; recovery) divided by that kind's fp32/bf16 ratio, and the base
  fine-tunes by theirs, from `../precision-methods-cpu/compare.md` (a projection, not a run).

    python results/quick-protocol2/actual_curves.py [DIR]
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from estimate_curves import METHODS, NEW_LEVELS, RECOVER_LEVELS, TASKS
from wallclock import intervals

ESTIMATE_COMMIT, ESTIMATE_S = "a75e143", 195_465
PRECISION = Path(__file__).resolve().parent.parent / "precision-methods-cpu" / "compare.md"


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True, text=True).stdout


def base_fits(folder: Path) -> list[float]:
    """Wall seconds of every base fine-tune committed after the estimate, plus the working tree's new ones."""
    walls = []
    for commit in git(folder, "log", "--format=%H", f"{ESTIMATE_COMMIT}..HEAD", "--", "base").split():
        changed = git(folder, "show", "--format=", "--name-only", "--diff-filter=AM", commit, "--", "base")
        for path in changed.split():
            if path.endswith("train_info.json"):
                walls.append(json.loads(git(folder, "show", f"{commit}:{path}"))["wall_s"])
    top = Path(git(folder, "rev-parse", "--show-toplevel").strip())
    for path in git(folder, "diff", "--name-only", "HEAD", "--", "base").split():
        if path.endswith("train_info.json"):
            walls.append(json.loads((top / path).read_text())["wall_s"])
    return walls


def bf16_ratios() -> tuple[dict[tuple[str, str], float], float]:
    """compare.md's fp32/bf16 ratio per (method, phase) and of the base fine-tune; phase "prune-only" sums the
    prune step and the evaluation, "evaluation" is the evaluation alone (a mask derived from stored scores)."""
    fp32, bf16, base = defaultdict(float), defaultdict(float), None
    for line in PRECISION.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 13 and cells[2] in METHODS:
            method, condition, phase = cells[2], cells[4], cells[5]
            keys = {"prune+recover": ["prune+recover"], "prune-only": ["prune-only"] + (
                ["evaluation"] if phase == "evaluation" else [])}.get(condition, [])
            for key in keys:
                fp32[(method, key)] += float(cells[6])
                bf16[(method, key)] += float(cells[7])
        elif line.startswith("base fine-tune"):
            base = float(line.rsplit("ratio", 1)[1])
    wanted = {(m, k) for m in METHODS for k in ("prune-only", "prune+recover", "evaluation")}
    if not wanted <= set(fp32) or base is None:
        sys.exit(f"{PRECISION}: expected each method's prune-only and prune+recover rows and the base fine-tune")
    return {key: fp32[key] / bf16[key] for key in fp32}, base


def main(folder: Path) -> None:
    before = len(git(folder, "show", f"{ESTIMATE_COMMIT}:./records.jsonl").splitlines())
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines() if line.strip()]
    plan = {("prune-only", lv) for lv in NEW_LEVELS} | {("prune+recover", lv) for lv in RECOVER_LEVELS}
    spent, counts, by_method, by_machine = defaultdict(float), defaultdict(int), defaultdict(float), defaultdict(float)
    for r in records[before:]:
        if r["task"] not in TASKS or r["method"] not in METHODS:
            continue
        level = r["budget"]["spec"]
        if (r["condition"], level) in plan:
            kind = "voita prune-only" if (r["method"], r["condition"]) == ("voita", "prune-only") else r["condition"]
        elif r["condition"] == "own-fine-tuning" and level in NEW_LEVELS:
            kind = "voita own-fine-tuning evaluations (not estimated)"
        else:
            continue
        spent[kind] += r["cost"]["wall_s"]
        counts[kind] += 1
        if "not estimated" not in kind:
            phase = "evaluation" if (r.get("trace") or {}).get("score_pass") else r["condition"]
            by_method[(r["method"], phase)] += r["cost"]["wall_s"]
            by_machine[r["cost"].get("machine", "not recorded")] += r["cost"]["wall_s"]

    fits = base_fits(folder)
    cells = sum(v for k, v in spent.items() if "not estimated" not in k)
    print(f"records at {ESTIMATE_COMMIT}: {before}; since: {len(records) - before}")
    for kind in sorted(spent):
        print(f"  {kind}: {counts[kind]} cells, {spent[kind]:.0f} thread-s")
    machines = "; ".join(f"{m} {v:.0f} thread-s" for m, v in sorted(by_machine.items()))
    print(f"  the estimated cells: {cells:.0f} thread-s; by CPU: {machines}")
    print(f"  base fine-tunes: {len(fits)}, {sum(fits):.0f} thread-s ({min(fits):.0f}-{max(fits):.0f} s each)")
    total = cells + sum(fits)
    print(f"spent on what was estimated: {total:.0f} thread-s = {total / 3600:.1f} thread-hours "
          f"({total / ESTIMATE_S:.2f} x the estimate's {ESTIMATE_S})")
    ratios, base_ratio = bf16_ratios()
    bf16 = sum(v / ratios[key] for key, v in by_method.items()) + sum(fits) / base_ratio
    print(f"in bf16, at {PRECISION.parent.name}'s ratios: about {bf16:.0f} thread-s, {total / bf16:.2f}x less "
          f"({(total - bf16) / 3600:.1f} thread-hours saved)")
    since = datetime.fromisoformat(git(folder, "show", "-s", "--format=%cI", ESTIMATE_COMMIT).strip())
    spans = [(s, e) for run, s, e in intervals(folder) if s >= since and run.get("budget") != "fraction:0.3"]
    wall = sum((e - s).total_seconds() for s, e in spans)
    print(f"curve invocations since: {len(spans)}, at least {wall:.0f} s = {wall / 3600:.1f} h of wall clock")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
