"""findings.md: every primary comparison and the area ranking, with the numbers of the report's CSVs."""
from __future__ import annotations

import pandas as pd
from synthetic_runs import make_records, write_run

from headprune_bench.benchmark.report.build import build_report
from headprune_bench.benchmark.report.tables import num, p_text

LEVELS = ["fraction:0.25", "fraction:0.5", "fraction:0.75"]


def test_findings_quote_the_csv_numbers_of_every_primary_test_and_the_area_lead(tmp_path):
    records = make_records(tasks=("rte",), seeds=range(8), conditions=("prune-only", "prune+recover"),
                           methods={"original": ["none"], "random": LEVELS, "michel": LEVELS, "confidence": LEVELS})
    out = build_report([write_run(tmp_path / "run", records)], plots=False, echo=False, n_boot=200,
                       n_boot_examples=20)
    text = (out / "findings.md").read_text()
    cf = pd.read_csv(out / "comparisons.csv")
    primary = cf[(cf.seeds == "all") & cf.family.str.endswith("/primary")]
    assert len(primary) == 2 * 3 * 3  # conditions x methods x levels
    for row in primary.itertuples():
        assert f"{num(row.mean_diff, sign=True)} [{num(row.ci_low)}, {num(row.ci_high)}]" in text
        assert p_text(row.p_holm) in text
    auc = pd.read_csv(out / "auc.csv")
    for _, g in auc[auc.kind == "method"].groupby("condition"):
        ranked = g.sort_values("mean", ascending=False)
        first, second = ranked.method.iloc[0], ranked.method.iloc[1]
        assert f"First by area above chance: {first}; second: {second}." in text
    assert text.count("## RTE (acc), ") == 2
    assert f"## Provenance\n\n**All {len(records)} records**" in text  # the summary report.md also shows
