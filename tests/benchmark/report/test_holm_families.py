"""Declared Holm families (docs/protocol.md §5): a primary p answers one question, whatever else is in the folder."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from headprune_bench.benchmark.report import analyse, load_runs
from headprune_bench.benchmark.report.build import build_report
from tests.synthetic_runs import make_records, write_run

SEEDS = tuple(range(8))
METHODS = {"original": ["none"], "random": ["fraction:0.5"], "michel": ["fraction:0.5"],
           "confidence": ["fraction:0.5"], "kwon-search": ["fraction:0.5"], "kwon-rearrange": ["fraction:0.5"]}
ABLATIONS = ("kwon-search", "kwon-rearrange")


def _holm_p(folder) -> dict[tuple, tuple[str, float]]:
    """(task, group, target label, reference label) -> (family id, Holm p over all seeds) of every tested comparison."""
    return {(r.task, r.group, c.target.label, c.reference.label): (c.family, c.all.p_holm)
            for r in analyse(load_runs([folder]), n_boot=100, n_boot_examples=20)
            for c in (*r.comparisons, *r.pairwise) if c.tested}


def test_adding_ablation_rows_moves_no_primary_or_pairwise_p(tmp_path):
    records = make_records(tasks=("rte",), seeds=SEEDS, methods=METHODS, conditions=("prune-only", "prune+recover"))
    without = [r for r in records if r["method"] not in ABLATIONS]
    assert len(without) < len(records)
    before = _holm_p(write_run(tmp_path / "without", without))
    after = _holm_p(write_run(tmp_path / "with", records))
    primary = {k: v for k, v in before.items() if v[0].endswith(("/primary", "/pairwise"))}
    assert {v[0] for v in primary.values()} == {"rte/prune-only/fraction:0.5/primary",
                                                "rte/prune+recover/fraction:0.5/primary",
                                                "rte/prune-only/fraction:0.5/pairwise",
                                                "rte/prune+recover/fraction:0.5/pairwise"}
    assert len(primary) == 3 * 2 + 3 * 2  # 3 methods vs the reference, 3 pairs; in each condition
    for key, (family, p) in primary.items():
        assert after[key][0] == family and after[key][1] == p and np.isfinite(p)
    # the ablations are tested, in their own family, never in a primary one
    abl = {k: v for k, v in after.items() if set(ABLATIONS) & {k[2].split(" ")[0], k[3].split(" ")[0]}}
    assert abl and {v[0].rsplit("/", 1)[1] for v in abl.values()} == {"ablation"}


def test_recovered_rows_against_the_original_are_a_secondary_family(tmp_path):
    """In prune+recover, the primary family is the methods against the control; the recovered rows (and the control)
    against the original form their own family, with Holm over them alone."""
    records = make_records(tasks=("mrpc",), seeds=SEEDS, conditions=("prune-only", "prune+recover"),
                           methods={"original": ["none"], "random": ["fraction:0.5"], "michel": ["fraction:0.5"]})
    (rec, _) = analyse(load_runs([write_run(tmp_path / "run", records)]), n_boot=100, n_boot_examples=20)
    kinds = {(c.target.name, c.kind): c.family for c in rec.comparisons}
    assert kinds[("michel", "control")] == "mrpc/prune+recover/fraction:0.5/primary"
    assert kinds[("michel", "original")] == "mrpc/prune+recover/fraction:0.5/vs-original"
    assert kinds[("control", "original")] == "mrpc/prune+recover/none/vs-original"
    for family in {c.family for c in rec.comparisons}:
        at = [c for c in rec.comparisons if c.family == family and c.tested]
        np.testing.assert_allclose([c.all.p_holm for c in at],
                                   multipletests([c.all.stats.p_exact for c in at], method="holm")[1])


def test_report_lists_its_families_and_every_csv_row_names_one(tmp_path):
    records = make_records(tasks=("rte",), seeds=SEEDS, methods=METHODS)
    out = build_report([write_run(tmp_path / "run", records)], plots=False, echo=False, n_boot=100,
                       n_boot_examples=20)
    cf = pd.read_csv(out / "comparisons.csv")
    assert cf.family.notna().all() and (cf.family.str.count("/") == 3).all()
    fams = pd.read_csv(out / "families.csv")
    primary = fams[fams.family == "rte/prune-only/fraction:0.5/primary"].iloc[0]
    assert primary["size"] == 3 and primary.kind == "primary" and primary.n == len(SEEDS)
    assert primary.min_p_holm == pytest.approx(3 * 2 / 2 ** len(SEEDS))
    assert set(primary.members.split("; ")) == {"random − original", "michel − original", "confidence − original"}
    md = (out / "report.md").read_text()
    assert "## Families" in md and "rte/prune-only/fraction:0.5/ablation" in md


def test_the_primary_reference_is_compared_whatever_against_names_and_a_test_has_one_family(tmp_path):
    records = make_records(tasks=("rte",), seeds=SEEDS, methods=METHODS)
    folder = write_run(tmp_path / "run", records)
    default = {k: v for k, v in _holm_p(folder).items() if v[0].endswith("/primary")}
    (r,) = analyse(load_runs([folder]), against=("michel",), n_boot=100, n_boot_examples=20)
    primary = {(r.task, r.group, c.target.label, c.reference.label): (c.family, c.all.p_holm)
               for c in r.comparisons if c.tested and c.family.endswith("/primary")}
    assert primary == default and len(primary) == 3
    # random − michel is a "vs michel" test; it is not repeated as a pair with another Holm p
    pairs = [frozenset((c.target.name, c.reference.name)) for c in (*r.comparisons, *r.pairwise)]
    assert len(pairs) == len(set(pairs)) and frozenset(("random", "michel")) in pairs


def test_a_superseded_curve_keeps_its_exact_p_outside_the_area_family_and_is_not_ranked(tmp_path):
    """An old option set of michel's whole curve, replaced by a later run into the folder: its area pairs give their
    exact p outside `.../area/pairwise`, whose Holm p equal those of the folder without it."""
    import json

    from headprune_bench.benchmark.report.curves import curve_frames

    levels = ["fraction:0.25", "fraction:0.5", "fraction:0.75"]
    records = make_records(tasks=("rte",), seeds=SEEDS, methods={"original": ["none"], "random": levels,
                                                                 "michel": levels, "confidence": levels})
    old = [dict(r, cell=r["cell"].replace("opts=abc123", "opts=old999"), method_options={"v": 1},
                score=r["score"] + 0.2) for r in records if r["method"] == "michel"]
    plans = [{"cells": [r["cell"] for r in old]}, {"cells": [r["cell"] for r in records]}]
    auc = {}
    for name, recs in (("with", records + old), ("without", records)):
        folder = write_run(tmp_path / name, recs)
        (folder / "runs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in plans))
        auc[name] = curve_frames(load_runs([folder]), n_boot=100).auc
    pairs = auc["with"][auc["with"].kind == "pair"]
    stale = pairs[pairs.method.str.contains("old999") | pairs.vs.str.contains("old999")]
    assert len(stale) == 3 and set(stale.outside) == {"superseded"} and stale.p_holm.isna().all()
    assert stale.p_exact.notna().all()
    def inside(frame):
        rows = frame[(frame.kind == "pair") & (frame.outside.fillna("") == "")]
        return {(m.replace(" opts=abc123", ""), v.replace(" opts=abc123", "")): p
                for m, v, p in zip(rows.method, rows.vs, rows.p_holm)}
    assert inside(auc["with"]) == inside(auc["without"]) and len(inside(auc["without"])) == 3
