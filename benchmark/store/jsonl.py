"""The result store of a run folder: ``records.jsonl``, ``failures.jsonl`` and ``runs.jsonl``, appended one
whole line at a time under a ``flock``; unreadable lines are named by readers and moved to ``rejected.jsonl`` by
writers. Guarantees (kill -9, concurrent runs): docs/choices.md ("The result store").
"""
from __future__ import annotations

import base64
import json
import logging
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headprune_bench.benchmark.provenance import now_utc
from headprune_bench.benchmark.store.records import NO_BUDGET, CellKey, Record

log = logging.getLogger("benchmark")

RECORDS = "records.jsonl"
FAILURES = "failures.jsonl"
PLANS = "runs.jsonl"
REJECTED = "rejected.jsonl"


try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process lock; one process per folder there
    fcntl = None


@contextmanager
def file_lock(fd: int, shared: bool = False):
    """Hold an advisory lock (exclusive, or ``shared`` for readers) on the open file ``fd`` (no-op where fcntl
    does not exist)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    try:
        yield
    finally:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)


@dataclass(frozen=True)
class BrokenLine:
    """One unreadable line of a JSONL file of a run folder.

    Attributes:
        path: the file.
        line: its 1-based line number.
        reason: why it cannot be read (``incomplete last line (an interrupted write)``, ``not valid JSON``,
            ``not a record ...``).
        text: the raw line (bytes decoded with replacement characters).
        raw: the line's bytes, as they were in the file.
    """

    path: Path
    line: int
    reason: str
    text: str
    raw: bytes = field(default=b"", compare=False, repr=False)

    def __str__(self) -> str:
        excerpt = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        return f"{self.path}: line {self.line}: {self.reason} ({excerpt!r})"


def record_problem(entry: Any) -> str | None:
    """Why ``entry`` cannot be a cell's record, or None when it can (the one rule of ``bench run`` and ``bench
    report``): ``Record.from_dict`` reads it, ``CellKey`` parses its cell, its score is finite, and its predictions
    and labels are two lists of one length."""
    if not isinstance(entry, dict):
        return "not a record (not a JSON object)"
    try:
        rec = Record.from_dict(entry)
        if not isinstance(rec.cell, str):
            raise ValueError(f"cell {rec.cell!r} is not a string")
        CellKey.parse(rec.cell)
        if not math.isfinite(rec.score):
            raise ValueError(f"score {rec.score!r} is not a finite number")
        if not (isinstance(rec.predictions, list) and isinstance(rec.labels, list)
                and len(rec.predictions) == len(rec.labels)):
            raise ValueError("predictions and labels are not two lists of one length")
        mask_problem = _mask_problem(rec)
        if mask_problem:
            raise ValueError(mask_problem)
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
        return f"not a record ({exc})"
    return None


def _mask_problem(rec: Record) -> str | None:
    """Why a record's ``mask`` (and ``scores``, ``head_scales``) disagree with its own counts, or None: a mask of
    ``heads_total`` 0/1 entries in rows of one length, as many zeros as ``heads_pruned`` and ``budget.achieved``,
    ``scores`` and ``head_scales`` of the mask's shape (a record with neither mask nor ``heads_total`` passes)."""
    mask = rec.mask
    if not (isinstance(mask, list) and all(isinstance(row, list) for row in mask)):
        return "mask is not a list of rows"
    if not mask and not rec.heads_total:
        return None  # (a first-schema record without a mask: nothing to check it against)
    shape = (len(mask), len(mask[0]) if mask else 0)
    if any(len(row) != shape[1] for row in mask) or shape[0] * shape[1] != rec.heads_total:
        return f"mask of rows {[len(row) for row in mask]} does not hold heads_total = {rec.heads_total} heads"
    if any(v not in (0, 1) or isinstance(v, bool) for row in mask for v in row):
        return "mask holds values other than 0 and 1"
    zeros = sum(v == 0 for row in mask for v in row)
    if zeros != rec.heads_pruned or zeros != rec.budget.achieved:
        return (f"mask prunes {zeros} heads, but heads_pruned = {rec.heads_pruned} and budget.achieved = "
                f"{rec.budget.achieved}")
    for name in ("scores", "head_scales"):
        rows = getattr(rec, name)
        if rows is not None and (not isinstance(rows, list) or len(rows) != shape[0]
                                 or any(not isinstance(r, list) or len(r) != shape[1] for r in rows)):
            return f"{name} is not [{shape[0]}][{shape[1]}] as the mask"
    return None


def _entry_problem(key: str, kind: str, what: str) -> Callable[[Any], str | None]:
    """A check of a JSON object whose optional ``key`` must be of ``kind`` (``"str"`` or ``"list of str"``)."""

    def problem(entry: Any) -> str | None:
        if not isinstance(entry, dict):
            return f"not {what} (not a JSON object)"
        value = entry.get(key, "" if kind == "str" else [])
        ok = isinstance(value, str) if kind == "str" else (
            isinstance(value, list) and all(isinstance(v, str) for v in value))
        return None if ok else f"not {what} ({key!r} is not a {kind})"

    return problem


#: What a valid line of each file of a run folder is (:func:`scan_jsonl`): a function giving the reason a parsed
#: line is not one, or None.
VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    RECORDS: record_problem,
    FAILURES: _entry_problem("cell", "str", "a failure entry"),
    PLANS: _entry_problem("cells", "list of str", "a run entry"),
}


def _scan_bytes(path: Path, data: bytes) -> tuple[list[tuple[int, Any, bytes]], list[BrokenLine]]:
    """Parse ``data`` (the content of ``path``) line by line: ([(line number, entry, raw line)], broken lines)."""
    problem_of = VALIDATORS.get(path.name, _entry_problem("-", "str", "an entry"))
    good: list[tuple[int, Any, bytes]] = []
    broken: list[BrokenLine] = []
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail: the bytes after the last newline (b"" when the file ends in one)
    for number, raw in enumerate(complete, start=1):
        if not raw.strip():
            continue
        text = raw.decode("utf-8", errors="replace")
        try:
            entry = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            broken.append(BrokenLine(path, number, "not valid JSON", text, raw))
            continue
        problem = problem_of(entry)
        if problem:
            broken.append(BrokenLine(path, number, problem, text, raw))
            continue
        good.append((number, entry, raw))
    if tail.strip():
        broken.append(BrokenLine(path, len(complete) + 1, "incomplete last line (an interrupted write)",
                                 tail.decode("utf-8", errors="replace"), tail))
    return good, broken


def scan_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[BrokenLine]]:
    """Read a JSONL file of a run folder under a shared lock: (its readable entries, its unreadable lines).

    Read-only: nothing is changed (``bench run`` moves unreadable lines aside, see :class:`RecordStore`).
    A missing file gives ``([], [])``.
    """
    path = Path(path)
    if not path.exists():
        return [], []
    with open(path, "rb") as fh, file_lock(fh.fileno(), shared=True):
        good, broken = _scan_bytes(path, fh.read())
    return [entry for _, entry, _ in good], broken


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The readable entries of a JSONL file; every unreadable line is logged as a warning naming it (use
    :func:`scan_jsonl` to get them)."""
    entries, broken = scan_jsonl(path)
    for b in broken:
        log.warning("%s: skipped", b)
    return entries


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reject_unreadable(path: Path) -> list[BrokenLine]:
    """Move every unreadable line of ``path`` (see :func:`scan_jsonl`) to ``rejected.jsonl`` beside it and rewrite
    ``path`` without them (a temporary file renamed over it), under the file's exclusive lock. Returns the lines
    moved (none: nothing changes). A crash leaves a line in both files, never in neither.

    Raises:
        OSError: the folder cannot be written (the caller names the path).
    """
    path = Path(path)
    if not path.exists():
        return []
    with open(path, "rb") as fh, file_lock(fh.fileno()):
        good, broken = _scan_bytes(path, fh.read())
        if not broken:
            return []
        moved = now_utc()
        for b in broken:
            entry = {"file": path.name, "line": b.line, "reason": b.reason, "text": b.text, "moved_at": moved}
            if b.raw and b.raw.decode("utf-8", errors="replace").encode("utf-8") != b.raw:
                entry["bytes_base64"] = base64.b64encode(b.raw).decode("ascii")  # not UTF-8: the bytes, verbatim
            append_jsonl(path.with_name(REJECTED), entry)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as out:
                out.write(b"".join(raw + b"\n" for _, _, raw in good))
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():  # the replace failed: leave no temporary file behind
                tmp.unlink()
        _fsync_dir(path.parent)
    return broken


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one line in one write, then fsync (under the file's exclusive lock; if the file was
    replaced by a repair while this process waited for the lock, the line goes to the new file)."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            with file_lock(fd):
                try:
                    current = os.stat(path).st_ino
                except FileNotFoundError:
                    current = None
                if current != os.fstat(fd).st_ino:  # replaced (reject_unreadable) while we waited: reopen
                    continue
                written = os.write(fd, line)
                if written != len(line):  # pragma: no cover - short write on a full disk
                    raise OSError(f"{path}: short write ({written} of {len(line)} bytes)")
                os.fsync(fd)
                return
        finally:
            os.close(fd)


def record_key(record: dict[str, Any]) -> str:
    """A record's cell key: its ``cell``, or for schema 0 (no ``cell``) the ``CellKey`` of its task, seed, method,
    budget spec and condition, without an ``opts`` part (as ``Record.from_dict`` migrates it).

    Raises:
        KeyError: no ``cell`` and no task, seed, method or condition.
    """
    if record.get("cell"):
        return record["cell"]
    budget = (record.get("budget") or {}).get("spec", NO_BUDGET)
    return str(CellKey(record["task"], int(record["seed"]), record["method"], budget, record["condition"], None))


class RecordStore:
    """Finished cells of a run folder, keyed by :func:`record_key`; the writer's view of the folder.

    Opening it moves every unreadable line of ``records.jsonl``, ``failures.jsonl`` and ``runs.jsonl`` to
    ``rejected.jsonl`` (:func:`reject_unreadable`); ``self.rejected`` lists them, each logged as a warning.
    ``read_only`` (``bench run --dry-run``): nothing is created or moved; unreadable lines are only skipped.

    Raises:
        OSError: the folder or one of its files cannot be read or written.
    """

    def __init__(self, folder: Path, read_only: bool = False) -> None:
        self.folder = Path(folder)
        self.path = self.folder / RECORDS
        self.rejected: list[BrokenLine] = []
        if not read_only:
            self.folder.mkdir(parents=True, exist_ok=True)
            for name in (RECORDS, FAILURES, PLANS):
                self.rejected += reject_unreadable(self.folder / name)
        for b in self.rejected:
            log.warning("%s: moved to %s (kept there); a record's cell will be computed again", b,
                        self.folder / REJECTED)
        self._records: dict[str, dict[str, Any]] = {}
        self._read_to: tuple[int, int] = (-1, 0)  # (inode, bytes) of records.jsonl already read
        self.refresh()

    def refresh(self) -> None:
        """Read the records appended since this store last read ``records.jsonl`` (by another ``bench run`` into
        the folder, or by this one); the whole file again if it was replaced."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as fh, file_lock(fh.fileno(), shared=True):
            inode = os.fstat(fh.fileno()).st_ino
            start = self._read_to[1] if inode == self._read_to[0] else 0
            fh.seek(start)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # (a line still being written is read next time)
        good, broken = _scan_bytes(self.path, data[:end])
        for b in broken:
            log.warning("%s", b)
        for _, rec, _ in good:
            self._records.setdefault(record_key(rec), rec)
        self._read_to = (inode, start + end)

    def __contains__(self, cell: str) -> bool:
        """Whether the cell key ``cell`` has a record."""
        return cell in self._records

    def get(self, cell: str) -> dict[str, Any] | None:
        """The record (JSON object) of the cell key ``cell``, or None."""
        return self._records.get(cell)

    def records(self) -> list[dict[str, Any]]:
        """Every record (JSON objects), in the order first written."""
        return list(self._records.values())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The records (JSON objects), in the order first written."""
        return iter(self._records.values())

    def add(self, record: Record | dict[str, Any]) -> None:
        """Append a finished cell: a :class:`Record` as ``record.to_dict()``, a JSON object with a ``cell`` key as
        it is. Ignored with a warning if the cell is already stored.

        Raises:
            OSError: ``records.jsonl`` cannot be written.
        """
        entry = record.to_dict() if isinstance(record, Record) else record
        cell = entry["cell"]
        if cell in self._records:
            log.warning("cell %s is already stored; not writing it twice", cell)
            return
        append_jsonl(self.path, entry)
        self._records[cell] = entry

    def add_failure(self, failure: dict[str, Any]) -> None:
        """Append a failed cell's entry (cell, error, traceback, time) to ``failures.jsonl``."""
        append_jsonl(self.folder / FAILURES, failure)

    def plans(self) -> list[dict[str, Any]]:
        """The readable entries of ``runs.jsonl``, oldest first."""
        return read_jsonl(self.folder / PLANS)

    def add_plan(self, plan: dict[str, Any]) -> None:
        """Append one ``bench run`` invocation (command, selection, planned ``cells``) to ``runs.jsonl``."""
        append_jsonl(self.folder / PLANS, plan)
