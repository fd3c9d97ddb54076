"""Wall clock of each invocation of ``bench run`` on a run folder, and their total: the README's "at least N h".

An invocation starts at its ``started`` in ``runs.jsonl`` and ends at the last timestamp before the next one
starts, among the records' ``finished_at``, ``failures.jsonl``'s ``time`` and the timestamped lines of ``run.log``
and ``logs/run-*.log``. A lower bound: a sitting that ran on until its session ended lost its running cells after its
last timestamp.

    python results/quick-protocol2/wallclock.py [DIR]
"""
from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def events(folder: Path) -> list[datetime]:
    """Every timestamp the folder holds: records, failures, log lines (UTC)."""
    found = [_utc(r["finished_at"]) for r in _jsonl(folder / "records.jsonl")]
    found += [_utc(f["time"]) for f in _jsonl(folder / "failures.jsonl") if f.get("time")]
    for log in [folder / "run.log", *sorted(folder.glob("logs/run-*.log"))]:
        for line in log.read_text(errors="replace").splitlines():
            if m := LOG_TIME.match(line):
                found.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc))
    return found


def intervals(folder: Path) -> list[tuple[dict, datetime, datetime]]:
    """Each invocation of ``runs.jsonl`` (its line), with its start and its last timestamp before the next start."""
    runs = sorted(_jsonl(folder / "runs.jsonl"), key=lambda r: _utc(r["started"]))
    if not runs:
        sys.exit(f"{folder}/runs.jsonl: no invocation recorded")
    stamps, out = events(folder), []
    for i, run in enumerate(runs):
        start = _utc(run["started"])
        end_before = _utc(runs[i + 1]["started"]) if i + 1 < len(runs) else datetime.max.replace(tzinfo=timezone.utc)
        out.append((run, start, max((t for t in stamps if start <= t < end_before), default=start)))
    return out


def main(folder: Path) -> None:
    total = 0.0
    spans = intervals(folder)
    for i, (_, start, end) in enumerate(spans):
        total += (end - start).total_seconds()
        print(f"{i + 1:3d}  {start:%Y-%m-%d %H:%M} -> {end:%H:%M}  {(end - start).total_seconds():8.0f} s")
    print(f"{len(spans)} invocations: at least {total:.0f} s = {total / 3600:.1f} h of wall clock")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
