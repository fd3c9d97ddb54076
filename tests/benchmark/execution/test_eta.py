"""The expected time of a run's work (headprune_bench.benchmark.execution.eta, benchmark.run.plan): medians of the
folder's finished work, else the shipped cost ratios x the task's base fine-tune; checked against the recorded
times of the committed run results/quick-protocol2, and `bench run --dry-run`."""
from __future__ import annotations

import importlib.util
import json

import pytest
from click.testing import CliRunner
from repo_paths import REPO_ROOT

from headprune_bench.benchmark.cli import main
from headprune_bench.benchmark.execution.eta import RATIOS_FILE, CostRatios, Estimator, Eta, Typical, Work, plan_work
from headprune_bench.benchmark.execution.time_limit import cost_parts
from headprune_bench.benchmark.store.folder import base_train_infos
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.benchmark.store.records import CellKey

FOLDER = REPO_ROOT / "results" / "quick-protocol2"
FACTOR = 1.5
"""Stated bound: a task's predicted total over its recorded total lies within [1/FACTOR, FACTOR]."""


def _script():
    spec = importlib.util.spec_from_file_location("cost_ratios", REPO_ROOT / "scripts" / "cost_ratios.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(task, seed, method, condition, wall, prune, budget="fraction:0.3", **trace):
    return {"task": task, "seed": seed, "method": method, "condition": condition, "budget": {"spec": budget},
            "cost": {"wall_s": wall, "prune_wall_s": prune}, "trace": trace}


def test_typical_times_are_medians_with_the_prune_step_apart():
    t = Typical()
    for seed, (prune, rest) in enumerate([(100, 5), (300, 7), (200, 6)]):
        t.add_record(_record("mrpc", seed, "michel", "prune-only", prune + rest, prune))
        t.add_record(_record("mrpc", seed, "michel", "prune+recover", 50, prune))  # its step's time copied: reused
    t.add_record(_record("mrpc", 0, "michel", "prune-only", 6.001, 0.001, budget="fraction:0.5",
                         score_pass={"cell": "x"}))
    assert t.cell("mrpc", "michel", "prune-only", prunes=True) == 200 + 6  # (the derived level: no prune sample)
    assert t.cell("mrpc", "michel", "prune+recover", prunes=False) == 50
    assert t.cell("mrpc", "michel", "prune+recover", prunes=True) == 250 and t.cell("rte", "michel", "x", True) is None
    t.add_base("mrpc", {"wall_s": 1000.0, "examples": 4000})
    t.add_base("mrpc", {"wall_s": float("nan")})  # skipped
    assert t.base_estimate("mrpc", None) == 1000 and t.base_estimate("rte", 2000) == 500  # scaled per example


def test_an_estimate_comes_from_the_folder_else_from_the_ratios_times_this_machines_base():
    ratios = CostRatios({"kwon": 0.2}, {"kwon|prune-only": 0.01, "original|prune-only": 0.005}, "test",
                        {"rte": {"prune": {"kwon": 0.3}, "rest": {"kwon|prune-only": 0.02}}})
    here = ("AMD EPYC", 1)
    est = Estimator(Typical(), Typical(), ratios, {"mrpc": 4000, "rte": 2000}, here)
    assert est(Work("mrpc", "kwon", "prune-only", True)) is None  # no base fine-tune timed yet
    est.learn_base("mrpc", {"wall_s": 1000.0, "examples": 4000, "machine": "AMD EPYC", "threads": 1})
    assert est(Work("mrpc", "kwon", "prune-only", True)) == pytest.approx(210.0)  # (0.2 + 0.01) x 1000
    assert est(Work("rte", "kwon", "prune-only", True)) == pytest.approx(160.0)  # rte's own: 0.32 x 500
    assert est(Work("mrpc", "kwon", "prune+recover", False)) is None  # a kind no committed run recorded
    est.learn_record({**_record("mrpc", 0, "kwon", "prune-only", 190.0, 180.0),
                      "cost": {"wall_s": 190.0, "prune_wall_s": 180.0, "machine": "AMD EPYC", "threads": 1}})
    assert est(Work("mrpc", "kwon", "prune-only", True)) == 190.0  # the folder's own time first
    est.learn_record({**_record("mrpc", 1, "kwon", "prune-only", 1900.0, 1800.0),
                      "cost": {"wall_s": 1900.0, "prune_wall_s": 1800.0, "machine": "NVIDIA H200", "threads": 1}})
    assert est(Work("mrpc", "kwon", "prune-only", True)) == 190.0  # another machine's: pooled, not here
    assert est(Work("mrpc", None)) == 1000.0


def test_the_plan_prunes_once_per_step_and_fine_tunes_only_missing_base_models():
    keys = [CellKey("mrpc", 0, m, level, c, None) for m, level, c in [
        ("original", "none", "prune-only"), ("michel", "fraction:0.1", "prune-only"),
        ("michel", "fraction:0.1", "prune+recover"), ("michel", "fraction:0.5", "prune-only"),
        ("voita", "fraction:0.1", "prune-only")]] + [CellKey("rte", 0, "michel", "fraction:0.1", "prune-only", None)]
    todo = {str(k) for k in keys}
    work = plan_work(keys, todo, set(), lambda m: m == "michel", lambda task, seed: task == "rte")
    prunes = {(k.task, k.method, k.budget, k.condition): work[str(k)].prunes for k in keys}
    assert prunes == {("mrpc", "original", "none", "prune-only"): False,
                      ("mrpc", "michel", "fraction:0.1", "prune-only"): True,
                      ("mrpc", "michel", "fraction:0.1", "prune+recover"): False,  # the prune-only cell's step
                      ("mrpc", "michel", "fraction:0.5", "prune-only"): False,  # scored once, at 0.1
                      ("mrpc", "voita", "fraction:0.1", "prune-only"): True,
                      ("rte", "michel", "fraction:0.1", "prune-only"): True}
    assert [k for k in work if k.startswith("base|")] == ["base|rte|0"]
    eta = Eta(Estimator(Typical(), Typical(), CostRatios({}, {}), {}), work, slots=2)
    assert eta.text() == "known after the first base fine-tune"


def _recorded_and_predicted(records, bases, ratios, task):
    """(recorded, predicted) seconds of ``task``'s cells that pruned or evaluated (no derived levels)."""
    own: dict = {}
    recorded = predicted = 0.0
    for r in sorted(records, key=lambda r: r["condition"] != "prune-only"):
        pruned, prune, rest = cost_parts(r, own)
        if r["task"] != task or (r["task"], r["seed"]) not in bases or (r.get("trace") or {}).get("score_pass"):
            continue
        ratio = ratios.cell("none", r["method"], r["condition"], pruned)
        assert ratio is not None, r["cell"]
        recorded += (prune if pruned else 0.0) + rest
        predicted += ratio * bases[(r["task"], r["seed"])]["wall_s"]
    return recorded, predicted


@pytest.mark.parametrize("source, target", [("mrpc", "rte"), ("rte", "mrpc")])
def test_ratios_of_one_task_predict_the_other_tasks_recorded_total_within_the_stated_factor(source, target):
    """Out of sample: the ratios of MRPC's records alone, times RTE's base fine-tunes, predict RTE's recorded
    total (and back), within FACTOR (the measured ratios: docs/running.md, "How long a run takes")."""
    records = RecordStore(FOLDER, read_only=True).records()
    bases = base_train_infos(FOLDER / "base")
    part, _ = _script().medians([FOLDER], source)
    recorded, predicted = _recorded_and_predicted(records, bases, CostRatios(part["prune"], part["rest"]), target)
    assert recorded > 10_000 and 1 / FACTOR <= predicted / recorded <= FACTOR, predicted / recorded


def test_the_shipped_ratios_are_what_the_script_computes_from_the_committed_run():
    """Not typed by hand: after adding records to results/quick-protocol2, rerun
    ``python scripts/cost_ratios.py --preset quick results/quick-protocol2``."""
    shipped = json.loads(RATIOS_FILE.read_text())["presets"]["quick"]
    pooled, used = _script().medians([FOLDER])
    assert shipped["source"] == f"python scripts/cost_ratios.py --preset quick results/quick-protocol2 ({used} records)"
    assert (shipped["prune"], shipped["rest"]) == (pooled["prune"], pooled["rest"])
    assert shipped["tasks"]["wnli"] == _script().medians([FOLDER], "wnli")[0]


def test_dry_run_lists_the_work_with_its_expected_times_and_writes_nothing(tmp_path, glue_dir):
    """On a copy of results/quick-protocol2's records and base fine-tune times (no model weights: every base is
    to fine-tune again), a level no run holds: each cell is estimated from the folder's cells of its kind, each
    base fine-tune from its train_info; the folder is left as it was. A fresh folder is not created."""
    out = tmp_path / "copy"
    out.mkdir()
    for name in ("records.jsonl", "run.json"):
        (out / name).write_bytes((FOLDER / name).read_bytes())
    for info in (FOLDER / "base").glob("*/train_info.json"):
        (out / "base" / info.parent.name).mkdir(parents=True)
        (out / "base" / info.parent.name / "train_info.json").write_bytes(info.read_bytes())
    before = sorted((p, p.stat().st_mtime_ns) for p in out.rglob("*"))
    args = ["run", "--methods", "random,kwon", "--tasks", "mrpc,rte", "--seeds", "0,1", "--preset", "quick",
            "--budget", "fraction:0.42", "--no-recover", "--workers", "2", "--data-dir", str(glue_dir), "--dry-run"]
    res = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    start = lines.index("bench run --dry-run: 12 cells planned, 8 to do; nothing is run or written")
    pieces = lines[start + 1:start + 1 + 12]  # 8 cells, 4 base fine-tunes (no weights in the copy)
    assert [p.split()[0] for p in pieces if p.startswith("  base|")] == ["base|mrpc|0", "base|mrpc|1", "base|rte|0",
                                                                         "base|rte|1"]
    assert all(p.startswith("  ") and not p.endswith("?") for p in pieces), pieces
    assert lines[start + 13] == "to do: base fine-tune 4; random prune-only 4; kwon prune-only 4"
    assert lines[start + 14].startswith("expected: ") and "(12 estimated); about " in lines[start + 14]
    assert lines[start + 14].endswith("left (12 pieces of work, 2 at a time)")
    assert sorted((p, p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    fresh = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "new")])
    assert fresh.exit_code == 0 and "known after the first base fine-tune" in fresh.output
    assert not (tmp_path / "new").exists()
