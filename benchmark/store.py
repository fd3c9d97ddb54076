"""The result store of a run folder: ``records.jsonl`` (one JSON line per finished cell),
``failures.jsonl`` (cells that raised; retried on the next run) and ``runs.jsonl`` (one line per ``bench run``
invocation: its command, selection and planned cell keys, so a report can tell which cells are missing).

A record is appended with a single ``write`` of one complete line to a file opened in append mode, then
flushed and fsync'ed, so a killed run leaves at most one incomplete last line. On open, an incomplete or
unparsable last line is cut off (and reported) before anything is appended; a finished cell is never written
twice (its key is checked first). Together: kill -9 at any moment, rerun, nothing lost or duplicated.

Appends and the tail repair hold an exclusive ``flock`` on the file (POSIX), so several ``bench run`` processes
may share one folder when they compute disjoint cells (e.g. one process per task): a process that starts cannot
cut off a line another process is writing at that moment.
"""
from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger("benchmark")

RECORDS = "records.jsonl"
FAILURES = "failures.jsonl"
PLANS = "runs.jsonl"


try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process lock; one process per folder there
    fcntl = None


@contextmanager
def _locked(fd: int):
    """Hold an exclusive advisory lock on the open file ``fd`` (no-op where fcntl does not exist)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)


def _repair_tail(path: Path) -> int:
    """Cut an incomplete last line (no terminating newline: an interrupted write) off ``path``.

    Returns the number of bytes removed.

    Raises:
        ValueError: a complete line that is not valid JSON (the file was edited by hand); names the line.
    """
    if not path.exists():
        return 0
    with open(path, "r+b") as fh, _locked(fh.fileno()):
        return _repair_locked(path, fh)


def _repair_locked(path: Path, fh) -> int:
    data = fh.read()
    good_end = data.rfind(b"\n") + 1  # 0 when there is no complete line at all
    for number, line in enumerate(data[:good_end].splitlines(), start=1):
        try:
            json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}: line {number} is not valid JSON (edited by hand?); fix or remove it") from None
    removed = len(data) - good_end
    if removed:
        fh.truncate(good_end)
        fh.flush()
        os.fsync(fh.fileno())
    return removed


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All complete records of a JSONL file (an incomplete last line is ignored, not an error)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one line in one write, then fsync."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        with _locked(fd):
            written = os.write(fd, line)
            if written != len(line):  # pragma: no cover - short write on a full disk
                raise OSError(f"{path}: short write ({written} of {len(line)} bytes)")
            os.fsync(fd)
    finally:
        os.close(fd)


class RecordStore:
    """Finished cells of a run folder, keyed by ``record["cell"]``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / RECORDS
        removed = _repair_tail(self.path)
        if removed:
            log.warning("%s: removed an incomplete last record (%d bytes) left by an interrupted run", self.path, removed)
        self._records: dict[str, dict[str, Any]] = {}
        for rec in read_jsonl(self.path):
            self._records.setdefault(rec["cell"], rec)

    def __contains__(self, cell: str) -> bool:
        return cell in self._records

    def get(self, cell: str) -> dict[str, Any] | None:
        return self._records.get(cell)

    def records(self) -> list[dict[str, Any]]:
        return list(self._records.values())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._records.values())

    def add(self, record: dict[str, Any]) -> None:
        """Append a finished cell (ignored with a warning if the cell is already stored)."""
        cell = record["cell"]
        if cell in self._records:
            log.warning("cell %s is already stored; not writing it twice", cell)
            return
        append_jsonl(self.path, record)
        self._records[cell] = record

    def add_failure(self, failure: dict[str, Any]) -> None:
        append_jsonl(self.folder / FAILURES, failure)

    def add_plan(self, plan: dict[str, Any]) -> None:
        """Append one ``bench run`` invocation (command, selection, planned ``cells``) to ``runs.jsonl``."""
        append_jsonl(self.folder / PLANS, plan)
