"""Compact predictions and labels (schema 4): one digit an example after ``ids:``, read back as lists of ints, a
record still one JSON line that pandas reads; older lines still read and written back as they were; the
converter of an old ``records.jsonl`` (headprune_bench.benchmark.store.compact)."""
from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from repo_paths import REPO_ROOT

from headprune_bench.benchmark.store.compact import compact_file, main
from headprune_bench.benchmark.store.jsonl import REJECTED, RecordStore, record_problem, scan_jsonl
from headprune_bench.benchmark.store.records import (
    COMPACT_SCHEMA,
    SCHEMA,
    Record,
    compact_ids,
    read_ids,
)

RESULTS = REPO_ROOT / "results"
PROTOCOL2 = RESULTS / "quick-protocol2" / "records.jsonl"  # schema 2, lists
OLDEST = RESULTS / "gpu-quick-10seeds" / "records.jsonl"  # schema 1, lists


def _old_line() -> str:
    with open(PROTOCOL2) as fh:
        return fh.readline().rstrip("\n")


def _new_record(n: int = 400, seed: int = 0, cell: str = "") -> Record:
    """A record as the runner writes it today, with ``n`` dev examples."""
    rng = random.Random(seed)
    raw = json.loads(_old_line())
    labels = [rng.randint(0, 1) for _ in range(n)]
    predictions = [y if rng.random() < 0.8 else 1 - y for y in labels]
    rec = Record.from_dict({**raw, "schema": SCHEMA, "predictions": predictions, "labels": labels,
                            "splits": {**raw["splits"], "dev": n}})
    if cell:
        rec.cell = cell
    return rec


def test_compact_ids_and_back():
    assert compact_ids([0, 1, 1, 0, 9]) == "ids:01109"
    assert read_ids("ids:01109") == [0, 1, 1, 0, 9]
    assert read_ids("ids:") == [] and read_ids(None) == [] and read_ids([2, 0]) == [2, 0]
    # what one digit cannot hold stays a list: empty, 10 or more, negative, bool, float
    for values in ([], [0, 10], [1, -1], [True, False], [0.0, 1.0]):
        assert compact_ids(values) == values
    import numpy as np
    assert compact_ids(list(np.array([2, 0, 1]))) == "ids:201"
    for bad in ("0110", "ids:01a", "ids:0 1", "ids:\uff10\uff11", "IDS:01"):  # (\uff10: a full-width digit)
        with pytest.raises(ValueError, match="neither a list nor 'ids:' followed by digits"):
            read_ids(bad)


def test_a_new_record_round_trips_and_stays_one_greppable_json_line(tmp_path):
    rec = _new_record()
    assert rec.schema == SCHEMA >= COMPACT_SCHEMA
    out = rec.to_dict()
    assert out["predictions"] == compact_ids(rec.predictions) and out["predictions"].startswith("ids:")
    assert len(out["predictions"]) == len("ids:") + 400
    back = Record.from_dict(json.loads(json.dumps(out)))
    assert back == rec and type(back.predictions[0]) is int
    assert back.to_dict() == out

    store = RecordStore(tmp_path)
    store.add(rec)
    text = (tmp_path / "records.jsonl").read_text()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, one JSON object
    assert isinstance(json.loads(text), dict) and f'"predictions": "{out["predictions"]}"' in text
    assert Record.from_dict(RecordStore(tmp_path).get(rec.cell)) == rec  # what a resumed run reads


def test_a_record_of_400_examples_is_at_least_a_fifth_smaller():
    rec = _new_record()
    compact = json.dumps(rec.to_dict(), sort_keys=True)
    lists = json.dumps({**rec.to_dict(), "predictions": rec.predictions, "labels": rec.labels}, sort_keys=True)
    assert len(lists) - len(compact) == 2 * (3 * 400 - (len("ids:") + 400 + 2))  # "[0, 1]" vs "ids:01" (quoted)
    assert len(compact) < 0.8 * len(lists)


def test_an_old_line_reads_as_lists_and_writes_back_as_it_was_read():
    line = _old_line()
    raw = json.loads(line)
    assert raw["schema"] < COMPACT_SCHEMA and isinstance(raw["predictions"], list)
    rec = Record.from_dict(raw)
    assert rec.predictions == raw["predictions"] and rec.labels == raw["labels"]
    assert json.dumps(rec.to_dict(), sort_keys=True) == line
    # an old schema whose lists were compacted (the converter) reads the same
    assert Record.from_dict({**raw, "predictions": compact_ids(raw["predictions"]),
                             "labels": compact_ids(raw["labels"])}) == rec


def test_pandas_reads_a_folder_of_old_and_new_lines(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(_old_line() + "\n")
    store = RecordStore(tmp_path)
    for i in range(3):
        store.add(_new_record(seed=i, cell=f"mrpc|seed={i}|random|fraction:0.3|prune-only|opts=abc"))
    # predictions that start with 0 and would read as one long number were it not for the prefix
    zeros = _new_record(seed=9, cell="mrpc|seed=9|random|fraction:0.3|prune-only|opts=abc")
    zeros.predictions = [0] * 399 + [1]
    store.add(zeros)
    frame = pd.read_json(path, lines=True)
    assert len(frame) == 5
    assert isinstance(frame.predictions[0], list)
    assert all(isinstance(p, str) and p.startswith("ids:") for p in frame.predictions[1:])
    assert read_ids(frame.predictions[4]) == zeros.predictions
    assert [read_ids(p) for p in frame.labels] == [Record.from_dict(json.loads(line)).labels
                                                   for line in path.read_text().splitlines()]


def test_an_unreadable_compact_string_is_refused_and_moved_aside(tmp_path):
    out = _new_record().to_dict()
    assert record_problem(out) is None
    bad = {**out, "predictions": "ids:01x" + out["predictions"][7:]}
    assert "predictions 'ids:01x" in record_problem(bad)
    short = {**out, "labels": out["labels"][:-1]}
    assert record_problem(short) == "not a record (predictions and labels are not two lists of one length)"
    (tmp_path / "records.jsonl").write_text(json.dumps(out) + "\n" + json.dumps(bad) + "\n")
    store = RecordStore(tmp_path)
    assert len(store.records()) == 1 and len(store.rejected) == 1
    assert json.loads((tmp_path / REJECTED).read_text())["line"] == 2


@pytest.mark.parametrize("path", [OLDEST, PROTOCOL2], ids=["schema-1", "schema-2"])
def test_the_converter_keeps_every_record_of_a_committed_file(path, tmp_path):
    dst = tmp_path / "records.jsonl"
    n, before, after = compact_file(path, dst)
    src_lines, dst_lines = path.read_text().splitlines(), dst.read_text().splitlines()
    assert n == len(src_lines) == len(dst_lines) and after == dst.stat().st_size < before == path.stat().st_size
    for old_line, new_line in zip(src_lines, dst_lines):
        old, new = json.loads(old_line), json.loads(new_line)
        assert new["schema"] == old["schema"] and new["predictions"].startswith("ids:")
        # nothing but the two fields changed, byte for byte
        assert json.dumps({**new, "predictions": old["predictions"], "labels": old["labels"]},
                          sort_keys=True) == old_line
        a, b = Record.from_dict(old), Record.from_dict(new)
        assert json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)
        assert old["schema"] < 2 or json.dumps(b.to_dict(), sort_keys=True) == old_line  # (1: migrated fields added)
        assert (a.predictions, a.labels) == (b.predictions, b.labels)


def test_the_converter_refuses_its_source_and_a_file_with_an_unreadable_line(tmp_path, capsys):
    src = tmp_path / "records.jsonl"
    src.write_text(_old_line() + "\n")
    assert main([str(src), str(src)]) == 1 and "write to another file" in capsys.readouterr().err
    assert main([str(src), str(tmp_path / "out.jsonl")]) == 0
    assert "1 records:" in capsys.readouterr().out
    assert scan_jsonl(tmp_path / "out.jsonl")[1] == []
    src.write_text(_old_line() + "\n{not json\n")
    with pytest.raises(ValueError, match="1 unreadable line"):
        compact_file(src, tmp_path / "again.jsonl")
    assert not (tmp_path / "again.jsonl").exists()
