"""The typed record and cell key (headprune_bench.benchmark.store.records): one builder and parser of keys, and a
reader that loads every committed records.jsonl and writes back exactly what it read."""
from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest
import torch
from repo_paths import REPO_ROOT

from headprune_bench.benchmark.provenance import machine_name
from headprune_bench.benchmark.store.jsonl import record_key
from headprune_bench.benchmark.store.records import (
    OWN,
    PRUNE_ONLY,
    RECOVER,
    WEIGHTS,
    CellKey,
    Record,
    layers_emptied,
    options_hash,
)

RESULTS = REPO_ROOT / "results"
COMMITTED = sorted(RESULTS.glob("*/records.jsonl"))
# A committed record written by the first schema-1 runner, before cost.machine / cost.threads existed: named, not
# COMMITTED[0], so that a newer folder sorting first (gpu-protocol2-seed0 does) cannot change what is tested.
OLDEST = RESULTS / "gpu-quick-10seeds" / "records.jsonl"


def test_cell_key_round_trip():
    key = CellKey("mrpc", 3, "voita", "fraction:0.3", "prune-only", "f6d5b188d5af")
    assert str(key) == "mrpc|seed=3|voita|fraction:0.3|prune-only|opts=f6d5b188d5af"
    assert CellKey.parse(str(key)) == key
    old = CellKey.parse("rte|seed=0|random|heads:5|prune-only")  # the first runner's keys had no opts part
    assert old.opts is None and str(old) == "rte|seed=0|random|heads:5|prune-only"
    assert CellKey.of("mrpc", 0, "original", "none", "prune-only", None).opts == "-"
    assert CellKey.of("mrpc", 0, "random", "heads:5", "prune-only", {"per_layer": True}).opts == \
        options_hash("random", {"per_layer": True}) != "-"


@pytest.mark.parametrize("bad", ["", "mrpc|0|random|heads:5|prune-only", "mrpc|seed=x|random|heads:5|prune-only",
                                 "a|b"], ids=["empty", "seed-without-name", "seed-not-a-number", "too-few-parts"])
def test_a_malformed_cell_key_is_refused(bad):
    with pytest.raises(ValueError, match="is not a cell key"):
        CellKey.parse(bad)


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_every_committed_record_reads_with_its_protocol_and_writes_back(path):
    """A committed record reads as what it was: under protocol 1 a re-training method's (AUBER's) prune-only cell
    evaluated its own weights, so it becomes an own-fine-tuning row; every other field is written back as read,
    plus the two schema-2 fields; a schema-2 record written back is the same JSON."""
    lines = path.read_text().splitlines()
    assert lines
    for line in lines:
        raw = json.loads(line)
        rec = Record.from_dict(raw)
        if raw.get("schema", 0) >= 2:
            assert rec.to_dict() == raw
            continue
        own = raw["condition"] == PRUNE_ONLY and raw["retrained"]
        assert rec.condition == (OWN if own else raw["condition"])
        assert rec.weights == ("own" if own else WEIGHTS[raw["condition"]])
        assert rec.layers_emptied == sum(1 for row in raw["mask"] if not any(row))
        expected = {**raw, "condition": rec.condition, "weights": rec.weights, "layers_emptied": rec.layers_emptied}
        assert rec.to_dict() == expected
        assert str(rec.key) == raw["cell"] == record_key(raw)  # the stored key is kept
        assert rec.schema == 1 and rec.budget.achieved == rec.heads_pruned


def test_a_protocol_1_recover_cell_of_a_re_training_method_started_from_its_own_weights():
    raw = json.loads(OLDEST.read_text().splitlines()[0])
    old = {k: v for k, v in raw.items() if k not in ("weights", "layers_emptied")}
    for method, options, weights in (("auber", {}, "own+recovery"), ("voita", {"joint": False}, "base+recovery"),
                                     ("random", {}, "base+recovery"), ("gone-method", {}, "unknown"),
                                     ("auber", {"no-such-option": 1}, "unknown")):
        rec = Record.from_dict({**old, "schema": 1, "method": method, "method_options": options,
                                "condition": RECOVER, "retrained": False})
        assert rec.weights == weights, method
    assert Record.from_dict({**old, "schema": 1, "condition": "control", "method": "original"}).weights == \
        "base+recovery"


def test_layers_emptied_and_weights_of_a_new_record():
    assert layers_emptied([[0, 0], [1, 0], [0, 0]]) == 2
    assert layers_emptied([[1, 1]]) == 0 and layers_emptied([]) == 0
    raw = json.loads(OLDEST.read_text().splitlines()[0])
    fields = {k: v for k, v in raw.items() if k not in ("schema", "weights", "layers_emptied")}
    for condition, retrained, weights in ((PRUNE_ONLY, False, "base"), (RECOVER, False, "base+recovery"),
                                          (OWN, True, "own"), (OWN, False, "base")):
        rec = Record.from_dict({**fields, "schema": 2, "condition": condition, "retrained": retrained,
                                "mask": [[0] * 12, [1] * 12]})
        assert (rec.weights, rec.layers_emptied) == (weights, 1), condition
        assert Record.from_dict(rec.to_dict()).to_dict() == rec.to_dict()


def test_head_scales_are_written_only_for_a_scaled_mask_and_reach_a_reused_prune_step():
    from headprune_bench.benchmark.cells.work import PruneState

    raw = json.loads(OLDEST.read_text().splitlines()[0])
    fields = {k: v for k, v in raw.items() if k not in ("schema", "weights", "layers_emptied")}
    plain = Record.from_dict({**fields, "schema": 2})
    assert "head_scales" not in plain.to_dict() and PruneState.of_record(plain.to_dict()).result.head_scales is None
    scales = [[0.0 if v == 0 else 1.25 for v in row] for row in raw["mask"]]
    scaled = Record.from_dict({**fields, "schema": 2, "head_scales": scales})
    assert Record.from_dict(scaled.to_dict()).head_scales == scales
    reused = PruneState.of_record(scaled.to_dict()).result
    assert reused.head_scales.tolist() == scales and reused.head_scales.dtype == torch.float64


def test_a_first_schema_record_is_migrated():
    raw = json.loads(OLDEST.read_text().splitlines()[0])
    old = {k: v for k, v in raw.items() if k not in ("cell", "schema", "base_failed")}
    rec = Record.from_dict(old)
    assert rec.schema == 0 and rec.base_failed is False
    assert rec.key.opts is None and str(rec.key) == record_key(old)
    with pytest.raises(ValueError, match="without score"):
        Record.from_dict({k: v for k, v in raw.items() if k != "score"})
    newer = dict(Record.from_dict(raw).to_dict(), schema=2, future_field=[1, 2])
    assert Record.from_dict(newer).to_dict() == newer  # unknown fields are kept, not dropped


def test_cost_names_the_machine_and_threads_only_when_known():
    """Records written before ``cost.machine`` / ``cost.threads`` existed read them as unknown and write back as
    they were read; a record that has them keeps them."""
    raw = json.loads(OLDEST.read_text().splitlines()[0])
    assert not {"machine", "threads"} & set(raw["cost"])  # written before the fields existed
    rec = Record.from_dict(raw)
    assert (rec.cost.machine, rec.cost.threads) == ("", 0) and rec.to_dict()["cost"] == raw["cost"]
    known = dict(raw, cost=dict(raw["cost"], machine="AMD EPYC", threads=1))
    back = Record.from_dict(known)
    assert (back.cost.machine, back.cost.threads) == ("AMD EPYC", 1)
    assert back.to_dict()["cost"] == known["cost"]


def test_machine_name_is_the_cpu_model_or_the_platform(monkeypatch):
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        lines = [line for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        if lines:
            assert machine_name("cpu") == machine_name(torch.device("cpu")) == lines[0].split(":", 1)[1].strip()

    def unreadable(self, *args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(Path, "read_text", unreadable)  # macOS, Windows: no /proc/cpuinfo
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert machine_name("cpu") == "arm64"
    monkeypatch.setattr(platform, "processor", lambda: "i386")
    assert machine_name("cpu") == "i386"
