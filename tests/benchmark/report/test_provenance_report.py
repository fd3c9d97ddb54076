"""The report's provenance (issue 61, item 3): per level and per declared family, the commits, the records from a
checkout with uncommitted changes (named), the library versions, machines and precision, on hand-made records whose
answers are known; and the section and CSVs that ``bench report`` writes."""
from __future__ import annotations

import json
import warnings

import pandas as pd
import pytest
from synthetic_runs import make_records, write_run

from headprune_bench.benchmark.report import build_report, load_runs
from headprune_bench.benchmark.report.analysis import analyse
from headprune_bench.benchmark.report.provenance import (
    PROVENANCE_COLUMNS,
    ProvenanceReport,
    family_members,
    level_members,
    provenance_frame,
    record_frame,
)
from headprune_bench.benchmark.store.records import NOT_RECORDED

CLEAN, OLD_DIRTY, NEW_DIRTY = "c1" * 20, "c2" * 20 + "+dirty", "c3" * 20 + "+dirty"
DIFF = "0123456789abcdef"


def _cell(task, seed, method, budget, condition):
    opts = "-" if method == "original" else "abc123"
    return f"{task}|seed={seed}|{method}|{budget}|{condition}|opts={opts}"


ORIGINAL_1 = _cell("mrpc", 1, "original", "none", "prune-only")
RANDOM_2 = _cell("mrpc", 2, "random", "fraction:0.5", "prune-only")
MICHEL_0 = _cell("mrpc", 0, "michel", "fraction:0.5", "prune-only")
RANDOM_2_LOW = _cell("mrpc", 2, "random", "fraction:0.25", "prune-only")
CONTROL_0 = _cell("mrpc", 0, "original", "none", "control")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """MRPC, seeds 0-2, original (+ control), random and michel at 0.25 and 0.5, prune-only and prune+recover. All
    on a clean commit, transformers 5.24.0, an EPYC, but: the original of seed 1 from a dirty checkout as an old
    record says it (``+dirty`` only), random 0.5 of seed 2 from one as a new record says it (``git_dirty`` and the
    diff's hash), michel 0.5 of seed 0 on transformers 5.25.0 and a Xeon, the control of seed 0 where git could
    not tell; random 0.25 of seed 2 derived its mask from the dirty random 0.5's scores. The experiment ran in bf16
    (run.json)."""
    records = make_records(tasks=("mrpc",), seeds=(0, 1, 2),
                           methods={"original": ["none"], "random": ["fraction:0.25", "fraction:0.5"],
                                    "michel": ["fraction:0.25", "fraction:0.5"]},
                           conditions=("prune-only", "prune+recover"))
    for r in records:
        versions = {"torch": "2.13.0+cpu", "transformers": "5.25.0" if r["cell"] == MICHEL_0 else "5.24.0"}
        r["provenance"] = {"git_commit": CLEAN, "versions": versions, "config_hash": "h1"}
        r["cost"]["machine"] = "Intel Xeon" if r["cell"] == MICHEL_0 else "AMD EPYC"
        r["started_at"] = f"2026-12-01T00:00:{len(r['cell']) % 60:02d}+00:00"
    by_cell = {r["cell"]: r for r in records}
    by_cell[ORIGINAL_1]["provenance"]["git_commit"] = OLD_DIRTY
    by_cell[RANDOM_2]["provenance"].update(git_commit=NEW_DIRTY, git_dirty=True, git_diff=DIFF)
    by_cell[CONTROL_0]["provenance"].update(git_commit="unknown", git_dirty="unknown", git_diff="unknown")
    by_cell[RANDOM_2_LOW]["trace"] = {"score_pass": {"cell": RANDOM_2, "prune_wall_s": 0.1}}
    out = write_run(tmp_path_factory.mktemp("prov") / "run", records)
    (out / "run.json").write_text(json.dumps({"config_hash": "h1", "experiment": {"extra": {"precision": "bf16"}}}))
    return out


@pytest.fixture(scope="module")
def data(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_runs([folder])


def _row(frame, **key):
    hit = frame
    for k, v in key.items():
        hit = hit[hit[k] == v]
    assert len(hit) == 1, key
    return hit.iloc[0]


def test_each_record_reads_its_provenance_and_old_records_say_what_they_can(data):
    recs = record_frame(data).set_index("cell")
    assert len(recs) == len(data.records) == 3 * (2 + 2 * 2 * 2)
    assert (recs.loc[ORIGINAL_1, "git_dirty"], recs.loc[ORIGINAL_1, "git_diff"]) == (True, NOT_RECORDED)
    assert (recs.loc[RANDOM_2, "git_dirty"], recs.loc[RANDOM_2, "git_diff"]) == (True, DIFF)
    assert recs.loc[CONTROL_0, "git_dirty"] == "unknown" and recs.loc[ORIGINAL_1, "commit"] == "c2" * 20
    assert set(recs.precision) == {"bf16"} and set(recs.base_check) == {NOT_RECORDED}
    assert recs.loc[MICHEL_0, "machine"] == "Intel Xeon" and recs.loc[MICHEL_0, "threads"] == NOT_RECORDED
    assert recs.loc[RANDOM_2_LOW, "mask_from"] == RANDOM_2 and recs.loc[RANDOM_2, "mask_from"] == ""


def test_per_level_the_references_count_at_every_level_and_dirty_records_are_named(data):
    levels = provenance_frame(data)
    assert list(levels.columns) == ["task", "group", "level", *PROVENANCE_COLUMNS]
    assert len(levels) == 4  # two groups x two levels
    low = _row(levels, group="prune-only", level="fraction:0.25")
    assert (low.records, low.seeds, low.dirty, low.dirty_cells) == (9, 3, 1, ORIGINAL_1)  # original + 2 methods
    assert low.commits == 2 and low.mixed == "" and low.dirty_unknown == 0
    high = _row(levels, group="prune-only", level="fraction:0.5")
    assert (high.records, high.dirty) == (9, 2) and set(high.dirty_cells.split("; ")) == {ORIGINAL_1, RANDOM_2}
    assert high.dirty_diffs in (f"{NOT_RECORDED} (1); {DIFF} (1)", f"{DIFF} (1); {NOT_RECORDED} (1)")
    assert high.transformers == "5.24.0 (8); 5.25.0 (1)" and high.mixed == "transformers, machine"
    assert high.machine == "AMD EPYC (8); Intel Xeon (1)" and high.precision == "bf16 (9)"
    recover = _row(levels, group="prune+recover", level="fraction:0.25")
    # the original's prune-only record (vs-original), the control and both methods' recovered records
    assert (recover.records, recover.dirty, recover.dirty_unknown) == (12, 1, 1)
    assert level_members(data).rec.nunique() == len(data.records)


def test_grouped_by_a_record_column_each_record_counts_once(data):
    by_method = provenance_frame(data, ["method"])
    assert by_method.records.sum() == len(data.records)
    assert dict(zip(by_method.method, by_method.dirty)) == {"original": 1, "random": 1, "michel": 0}
    by_seed_level = provenance_frame(data, ["task", "level", "seed"])  # members' level, the record's seed
    assert _row(by_seed_level, level="fraction:0.5", seed=2).dirty == 1
    with pytest.raises(KeyError, match="no column nope"):
        provenance_frame(data, ["nope"])


def test_a_family_holds_the_records_its_tests_use(data):
    results = analyse(data, n_boot=50, n_boot_examples=10)
    members = family_members(data, results)
    families = provenance_frame(data, ["family"], members).set_index("family")
    primary = families.loc["mrpc/prune-only/fraction:0.5/primary"]
    assert (primary.records, primary.dirty) == (9, 2)  # both methods and the original they are tested against
    pairwise = families.loc["mrpc/prune-only/fraction:0.5/pairwise"]
    assert (pairwise.records, pairwise.dirty, pairwise.dirty_cells) == (6, 1, RANDOM_2)  # no original in a pair
    assert families.loc["mrpc/prune+recover/fraction:0.25/primary"].dirty_unknown == 1  # the control
    assert families.loc["mrpc/prune-only/fraction:0.25/pairwise"].dirty == 0


def test_bench_report_writes_the_section_and_the_csvs(folder, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = build_report([folder], plots=False, echo=False, out=tmp_path / "report", n_boot=50,
                           n_boot_examples=10)
    text = (out / "report.md").read_text()
    section = text[text.index("## Provenance"):]
    section = section[:section.index("\n## ", 1)]
    assert "2 from a checkout with uncommitted changes" in section and "1 that cannot say" in section
    for cell in (ORIGINAL_1, RANDOM_2):  # named, as code, the key's | escaped so that the table holds
        assert "`" + cell.replace("|", "\\|") + "`" in section
    assert DIFF in section and "1 other record(s) derive their masks" in section
    assert "transformers: 5.24.0 (29); 5.25.0 (1)" in section and "precision: bf16 (30)" in section
    assert "| transformers " in section and "| machine " in section and "| numpy " not in section
    families = pd.read_csv(out / "provenance.csv")
    assert {"family", "task", "group", "level", "dirty", "dirty_cells", "transformers", "mixed"} <= set(families)
    assert families.set_index("family").loc["mrpc/prune-only/fraction:0.5/primary", "dirty"] == 2
    assert len(pd.read_csv(out / "provenance_records.csv")) == 30


def test_no_records_no_section(tmp_path):
    folder = write_run(tmp_path / "empty", [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ProvenanceReport.of(load_runs([folder]), [])
    assert report.section() == [] and report.levels.empty and report.records.empty
