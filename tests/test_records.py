"""The typed record and cell key (benchmark.records): one builder and parser of keys, and a reader that loads every
committed records.jsonl and writes back exactly what it read."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark.records import CellKey, Record, options_hash
from benchmark.store import record_key

RESULTS = Path(__file__).resolve().parents[1] / "results"
COMMITTED = sorted(RESULTS.glob("*/records.jsonl"))


def test_cell_key_round_trip_and_errors():
    key = CellKey("mrpc", 3, "voita", "fraction:0.3", "prune-only", "f6d5b188d5af")
    assert str(key) == "mrpc|seed=3|voita|fraction:0.3|prune-only|opts=f6d5b188d5af"
    assert CellKey.parse(str(key)) == key
    old = CellKey.parse("rte|seed=0|random|heads:5|prune-only")  # the first runner's keys had no opts part
    assert old.opts is None and str(old) == "rte|seed=0|random|heads:5|prune-only"
    assert CellKey.of("mrpc", 0, "original", "none", "prune-only", None).opts == "-"
    assert CellKey.of("mrpc", 0, "random", "heads:5", "prune-only", {"per_layer": True}).opts == \
        options_hash("random", {"per_layer": True}) != "-"
    for bad in ("", "mrpc|0|random|heads:5|prune-only", "mrpc|seed=x|random|heads:5|prune-only", "a|b"):
        with pytest.raises(ValueError, match="is not a cell key"):
            CellKey.parse(bad)


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_every_committed_record_reads_and_writes_back_unchanged(path):
    lines = path.read_text().splitlines()
    assert lines
    for line in lines:
        raw = json.loads(line)
        rec = Record.from_dict(raw)
        assert rec.to_dict() == raw
        assert json.dumps(rec.to_dict(), sort_keys=True) == json.dumps(raw, sort_keys=True)
        assert str(rec.key) == raw["cell"] == record_key(raw)
        assert rec.schema == 1 and rec.budget.achieved == rec.heads_pruned


def test_a_first_schema_record_is_migrated():
    raw = json.loads(COMMITTED[0].read_text().splitlines()[0])
    old = {k: v for k, v in raw.items() if k not in ("cell", "schema", "base_failed")}
    rec = Record.from_dict(old)
    assert rec.schema == 0 and rec.base_failed is False
    assert rec.key.opts is None and str(rec.key) == record_key(old)
    with pytest.raises(ValueError, match="without score"):
        Record.from_dict({k: v for k, v in raw.items() if k != "score"})
    newer = dict(raw, future_field=[1, 2])
    assert Record.from_dict(newer).to_dict() == newer  # unknown fields are kept, not dropped
