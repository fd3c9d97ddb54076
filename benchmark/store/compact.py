"""Rewrite a ``records.jsonl`` with ``predictions`` and ``labels`` in the compact form of schema 4
(:func:`~headprune_bench.benchmark.store.records.compact_ids`) and nothing else changed, each record keeping its
schema: ``python -m headprune_bench.benchmark.store.compact SRC DST``. DST is written only after every new line has
been read back as the record its source line was (docs/output-files.md, "Record schemas")."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from headprune_bench.benchmark.store.jsonl import record_problem, scan_jsonl
from headprune_bench.benchmark.store.records import Record, compact_ids

IDS_FIELDS = ("predictions", "labels")


def compact_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` (a record's JSON object) with its ``predictions`` and ``labels`` lists compacted."""
    out = dict(entry)
    for name in IDS_FIELDS:
        if isinstance(out.get(name), list):
            out[name] = compact_ids(out[name])
    return out


def _same_record(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why the compacted ``new`` does not read as ``old``, or None: the store accepts it, its two fields read back
    as the old lists, and the two records write the same JSON."""
    problem = record_problem(new)
    if problem:
        return problem
    a, b = Record.from_dict(old), Record.from_dict(new)
    if (a.predictions, a.labels) != (b.predictions, b.labels):
        return "predictions or labels read back otherwise"
    if json.dumps(a.to_dict(), sort_keys=True) != json.dumps(b.to_dict(), sort_keys=True):
        return "the record reads back otherwise"
    return None


def compact_file(src: Path, dst: Path) -> tuple[int, int, int]:
    """Write ``src``'s records to ``dst`` with compact ``predictions`` and ``labels``, one line each, in order:
    (records, bytes of ``src``, bytes of ``dst``).

    Raises:
        ValueError: ``dst`` is ``src``; ``src`` has an unreadable line (``bench run`` into its folder moves such
            lines to ``rejected.jsonl``); or a compacted line does not read back as its record (nothing written).
    """
    src, dst = Path(src), Path(dst)
    if dst.resolve() == src.resolve():
        raise ValueError(f"{dst}: write to another file, check it, then move it over {src}")
    entries, broken = scan_jsonl(src)
    if broken:
        raise ValueError(f"{broken[0]}; {len(broken)} unreadable line(s): not compacted")
    lines = []
    for number, entry in enumerate(entries, start=1):
        new = compact_entry(entry)
        problem = _same_record(entry, new)
        if problem:
            raise ValueError(f"{src}: record {number}: {problem}: not compacted")
        lines.append(json.dumps(new, sort_keys=True) + "\n")
    data = "".join(lines).encode("utf-8")
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    return len(entries), src.stat().st_size, len(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headprune_bench.benchmark.store.compact",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a records.jsonl")
    parser.add_argument("dst", type=Path, help="the file to write (not SRC)")
    args = parser.parse_args(argv)
    try:
        n, before, after = compact_file(args.src, args.dst)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    per = (lambda size: f"{size / n:.0f}") if n else (lambda size: "-")
    print(f"{n} records: {before} -> {after} bytes ({per(before)} -> {per(after)} a record) in {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
