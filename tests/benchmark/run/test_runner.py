"""The runner end to end on real GLUE data with the packaged MiniLM (smoke preset): records, resume,
kill -9 and rerun, determinism, configuration checks, matched budgets, recover/control, the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
from click.testing import CliRunner
from fakes import CountsPrunes, OwnBudget  # importing fakes registers every test-* method these tests name
from smoke_runs import kill_after_records, run_smoke, smoke_config, stable

from headprune_bench.benchmark import training
from headprune_bench.benchmark.cli import main
from headprune_bench.benchmark.config.presets import ConfigError
from headprune_bench.benchmark.execution.resolve import resolve_execution
from headprune_bench.benchmark.provenance import machine_name
from headprune_bench.benchmark.run.runner import Runner
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.benchmark.store.records import SCHEMA, read_ids

METHODS = "random,confidence,michel"
TASKS = "wnli,mrpc"


def _config(out, glue_dir, **kw):
    return smoke_config(out, glue_dir, **{"methods_spec": METHODS, "tasks_spec": TASKS, **kw})


def _run(out, glue_dir, **kw):
    return run_smoke(out, glue_dir, **{"methods_spec": METHODS, "tasks_spec": TASKS, **kw})


_stable = stable


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, glue_dir):
    out = tmp_path_factory.mktemp("smoke")
    _run(out, glue_dir)
    return out


def test_records_carry_the_protocol_fields(smoke_run, glue_dir):
    records = RecordStore(smoke_run).records()
    # the machine the time limit estimates a serial run's cells for (headprune_bench.benchmark.execution.time_limit)
    # is the one they name
    assert {(r["cost"]["machine"], r["cost"]["threads"]) for r in records} == {
        resolve_execution(smoke_config(smoke_run, glue_dir)).machine()}
    assert len(records) == 2 * 4  # 2 tasks x (original + 3 methods), 1 seed
    for r in records:
        for field in ("task", "seed", "method", "method_options", "budget", "condition", "mask", "metrics",
                      "majority_baseline", "degenerate", "predictions", "labels", "cost", "provenance",
                      "started_at", "finished_at", "base_failed"):
            assert field in r, field
        assert len(r["mask"]) == 6 and all(len(row) == 12 for row in r["mask"])
        assert r["heads_pruned"] == sum(v == 0 for row in r["mask"] for v in row) == r["budget"]["achieved"]
        assert len(read_ids(r["predictions"])) == len(read_ids(r["labels"])) == r["splits"]["dev"] == 64
        assert r["splits"]["mini_dev"] == 16 and r["splits"]["mini_train"] == 48
        assert {"git_commit", "versions", "model_revision", "data_hashes", "config_hash"} <= set(r["provenance"])
        assert r["cost"]["device"] == "cpu" and r["cost"]["wall_s"] > 0
        assert r["cost"]["machine"] == machine_name("cpu") and 1 <= r["cost"]["threads"] <= os.cpu_count()
        if r["method"] == "original":
            assert r["heads_pruned"] == 0
        else:
            assert r["budget"]["target"] == r["heads_pruned"] == round(0.3 * 72)
        assert set(r["metrics"]) == ({"accuracy", "f1"} if r["task"] == "mrpc" else {"accuracy"})
    michel = next(r for r in records if r["method"] == "michel")
    # michel: one forward+backward over mini-train (48) for the gate gradients, plus the 64 dev examples
    assert michel["cost"]["backward_examples"] == 48 and michel["cost"]["forward_examples"] == 48 + 64
    assert (smoke_run / "base" / "wnli-seed0" / "config.json").exists()
    info = json.loads((smoke_run / "base" / "wnli-seed0" / "train_info.json").read_text())
    assert info["machine"] == machine_name("cpu") and 1 <= info["threads"] <= os.cpu_count()


def test_each_invocation_records_its_planned_cells(smoke_run):
    plans = [json.loads(l) for l in (smoke_run / "runs.jsonl").read_text().splitlines()]
    assert plans[0]["tasks"] == ["wnli", "mrpc"] and plans[0]["methods"] == ["random", "confidence", "michel"]
    assert set(plans[0]["cells"]) == {r["cell"] for r in RecordStore(smoke_run).records()}
    assert plans[0]["to_do"] == len(plans[0]["cells"]) and plans[0]["budget"] == "fraction:0.3"


def test_git_dirty_check_leaves_out_the_run_folder(monkeypatch, tmp_path):
    from headprune_bench.benchmark import provenance

    calls = []

    def fake_run(args, **kw):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="abc\n" if args[1] == "rev-parse" else "", stderr="")

    monkeypatch.setattr(provenance.subprocess, "run", fake_run)
    assert provenance.git_commit(provenance.REPO_ROOT / "results" / "x") == "abc"
    assert calls[-1][-1] == ":(exclude)results/x"
    assert provenance.git_commit(tmp_path) == "abc" and ":(exclude)" not in " ".join(calls[-1])  # outside the repo


def test_rerun_does_no_new_work(smoke_run, glue_dir, monkeypatch):
    before = (smoke_run / "records.jsonl").read_bytes()

    def forbidden(*a, **k):
        raise AssertionError("a finished run was recomputed")

    monkeypatch.setattr(training, "fine_tune", forbidden)
    monkeypatch.setattr(training, "evaluate", forbidden)
    _run(smoke_run, glue_dir)
    assert (smoke_run / "records.jsonl").read_bytes() == before


def test_changed_configuration_is_refused(smoke_run, glue_dir):
    with pytest.raises(ConfigError, match=r"different configuration(.|\n)*max_train_examples: 64 -> 0"):
        Runner(_config(smoke_run, glue_dir, preset="quick"))


def test_task_subsets_share_a_folder_but_changed_data_is_refused(smoke_run, glue_dir, tmp_path):
    full = json.loads((smoke_run / "run.json").read_text())
    # a subset of the folder's tasks (one process per task) is accepted; the folder's hashes are kept
    runner = Runner(_config(smoke_run, glue_dir, tasks_spec="mrpc"))
    runner.close()
    assert runner.config_hash == full["config_hash"]
    assert json.loads((smoke_run / "run.json").read_text()) == full
    # a new task is added to run.json
    other = tmp_path / "other"
    Runner(_config(other, glue_dir, tasks_spec="wnli")).close()
    Runner(_config(other, glue_dir, tasks_spec="rte")).close()
    hashes = json.loads((other / "run.json").read_text())["experiment"]["data_hashes"]
    assert sorted(hashes) == ["rte/dev.tsv", "rte/train.tsv", "wnli/dev.tsv", "wnli/train.tsv"]
    # the same file with other contents is refused, naming the file
    stored = json.loads((other / "run.json").read_text())
    stored["experiment"]["data_hashes"]["rte/dev.tsv"] = "0" * 16
    (other / "run.json").write_text(json.dumps(stored))
    with pytest.raises(ConfigError, match=r"data_hashes.rte/dev.tsv: '0000000000000000' ->"):
        Runner(_config(other, glue_dir, tasks_spec="rte"))


def test_a_moved_data_folder_is_the_same_data_but_the_hub_is_not(smoke_run, glue_dir, tmp_path, caplog):
    """The same files at another path (a clone on another machine, CI) resume the folder; only their hashes count."""
    import logging
    import shutil

    from headprune_bench.benchmark.config.presets import Experiment

    full = json.loads((smoke_run / "run.json").read_text())
    moved = tmp_path / "elsewhere" / "glue"
    for task in ("MRPC", "WNLI"):
        shutil.copytree(glue_dir / task, moved / task)
    with caplog.at_level(logging.INFO, logger="benchmark"):
        runner = Runner(_config(smoke_run, moved))
        runner.close()
    assert runner.config_hash == full["config_hash"]
    assert json.loads((smoke_run / "run.json").read_text()) == full  # the folder keeps the path it was made with
    assert f"the data folder is now {moved.resolve()}" in caplog.text
    # the moved copy with one file changed is refused, naming the file
    dev = moved / "MRPC" / "dev.tsv"
    dev.write_text(dev.read_text() + "\n")
    with pytest.raises(ConfigError, match=r"data_hashes.mrpc/dev.tsv: "):
        Runner(_config(smoke_run, moved))
    # the path never enters a new folder's hash; the hub and local files are different sources
    settings = {k: v for k, v in full["experiment"].items() if k != "data_source"}
    digest = {src: Experiment(**settings, data_source=src).digest()
              for src in ("/a/glue", "/b/glue", "hub:nyu-mll/glue")}
    assert digest["/a/glue"] == digest["/b/glue"] != digest["hub:nyu-mll/glue"]
    stored = json.loads((smoke_run / "run.json").read_text())
    stored["experiment"]["data_source"] = "hub:nyu-mll/glue"
    (smoke_run / "run.json").write_text(json.dumps(stored))
    try:
        with pytest.raises(ConfigError, match=r"data_source: 'hub:nyu-mll/glue' -> '/"):
            Runner(_config(smoke_run, glue_dir))
    finally:
        (smoke_run / "run.json").write_text(json.dumps(full, indent=2, sort_keys=True))


def _rec(name: str, **extra) -> dict:
    """A minimal record the store accepts (store.record_problem), with the cell key ``wnli|seed=0|random|NAME|...``."""
    return {"task": "wnli", "seed": 0, "method": "random", "condition": "prune-only", "score": 0.5,
            "primary_metric": "accuracy", "predictions": [0], "labels": [0],
            "cell": f"wnli|seed=0|random|{name}|prune-only|opts=-", **extra}


A, B = _rec("heads:1")["cell"], _rec("heads:2")["cell"]


def test_incomplete_last_line_is_repaired(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(_rec("heads:1", x=1)) + "\n" + json.dumps(_rec("heads:2", x=9))[:40])
    store = RecordStore(tmp_path)
    assert [r["cell"] for r in store.records()] == [A]
    assert path.read_text() == json.dumps(_rec("heads:1", x=1)) + "\n"
    store.add(_rec("heads:2", x=2))
    store.add(_rec("heads:2", x=3))  # never twice
    assert [json.loads(l)["x"] for l in path.read_text().splitlines()] == [1, 2]
    # a complete line that is not JSON (edited by hand) is moved to rejected.jsonl, named, never dropped silently
    path.write_text("not json\n" + json.dumps(_rec("heads:1")) + "\n")
    store = RecordStore(tmp_path)
    assert [(b.line, b.reason) for b in store.rejected] == [(1, "not valid JSON")]
    assert [r["cell"] for r in store.records()] == [A] and path.read_text() == json.dumps(_rec("heads:1")) + "\n"
    assert json.loads((tmp_path / "rejected.jsonl").read_text().splitlines()[-1])["text"] == "not json"


def test_store_writes_a_record_as_its_dict_and_keys_first_schema_records_by_cell_key(tmp_path):
    """RecordStore.add takes a Record and writes record.to_dict(); record_key builds a first-schema record's key
    with CellKey (no opts part), as Record.from_dict migrates it."""
    from headprune_bench.benchmark.store.jsonl import record_key
    from headprune_bench.benchmark.store.records import CellKey, Record

    old = {"task": "wnli", "seed": 0, "method": "random", "condition": "prune-only", "score": 0.5,
           "primary_metric": "accuracy", "budget": {"spec": "fraction:0.3", "achieved": 4}}
    rec = Record.from_dict(old)
    assert record_key(old) == rec.cell == str(CellKey("wnli", 0, "random", "fraction:0.3", "prune-only", None))
    store = RecordStore(tmp_path)
    store.add(rec)
    store.add(rec)  # never twice
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [json.loads(json.dumps(rec.to_dict()))]
    assert store.get(rec.cell) == rec.to_dict() and rec.cell in RecordStore(tmp_path)


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_repair_waits_for_a_line_another_process_is_writing(tmp_path):
    """Two processes sharing a folder: a store opened while another holds the append lock must not cut off the
    half-written line; it waits, then finds the line complete."""
    import fcntl
    import threading

    path = tmp_path / "records.jsonl"
    first, second = json.dumps(_rec("heads:1")), json.dumps(_rec("heads:2"))
    path.write_text(first + "\n" + second[:5])  # a writer is mid-line ...
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)  # ... and holds the lock, as append_jsonl does
    opened: list[RecordStore] = []
    reader = threading.Thread(target=lambda: opened.append(RecordStore(tmp_path)))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive(), "the tail repair did not wait for the writer's lock"
    os.write(fd, (second[5:] + "\n").encode())
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    reader.join(10)
    assert [r["cell"] for r in opened[0].records()] == [A, B]
    assert path.read_text() == first + "\n" + second + "\n"


@pytest.mark.slow  # about 30-60 s each: kept out of the CI suite's 10 minutes
def test_kill_minus_9_then_rerun_equals_uninterrupted_run(smoke_run, glue_dir, tmp_path):
    """A real `bench run` process killed with SIGKILL mid-run, then rerun, gives the same records (masks,
    predictions, metrics) as the uninterrupted run in another process: resume and determinism in one test."""
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "headprune_bench.benchmark.cli", "run", "--preset", "smoke", "--methods", METHODS,
           "--tasks", TASKS, "--device", "cpu", "--data-dir", str(glue_dir), "--out", str(out), "--no-progress",
           "--no-recover"]
    records = out / "records.jsonl"
    n_before = kill_after_records(cmd, records, 5, timeout_s=300)
    assert 5 <= n_before < 8
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = RecordStore(out).records()
    assert len(resumed) == len(records.read_text().splitlines()) == 8  # nothing lost, nothing duplicated
    assert _stable(resumed) == _stable(RecordStore(smoke_run).records())


def test_matched_budget_and_recover_control(tmp_path, glue_dir):
    with pytest.raises(ConfigError, match="michel itself needs a head count"):
        Runner(_config(tmp_path, glue_dir, methods_spec="random,michel", budget="matched:michel"))
    _run(tmp_path, glue_dir, methods_spec="random,michel,test-self-budgeted", tasks_spec="wnli",
         budget="matched:test-self-budgeted", recover=True, match_per_layer=True)
    recs = {(r["method"], r["condition"]): r for r in RecordStore(tmp_path).records()}
    assert set(recs) == {("original", "prune-only"), ("original", "control"), ("michel", "prune-only"),
                         ("michel", "prune+recover"), ("random", "prune-only"), ("random", "prune+recover"),
                         ("test-self-budgeted", "prune-only"), ("test-self-budgeted", "prune+recover")}
    setter = recs[("test-self-budgeted", "prune-only")]
    assert setter["heads_pruned"] == 7 and setter["budget"]["target"] is None
    assert recs[("michel", "prune-only")]["heads_pruned"] == 7
    assert recs[("random", "prune-only")]["budget"]["target"] == setter["heads_pruned"]
    assert setter["budget"]["spec"] == "matched:test-self-budgeted/per-layer"
    # per-layer counts are matched too (--match-per-layer; random's per_layer option defaults to True)
    def per_layer(r):
        return [sum(v == 0 for v in row) for row in r["mask"]]

    assert per_layer(recs[("random", "prune-only")]) == per_layer(setter)
    # recover keeps the mask; the control is the unpruned model fine-tuned with the same budget
    assert recs[("random", "prune+recover")]["mask"] == recs[("random", "prune-only")]["mask"]
    assert recs[("michel", "prune+recover")]["scores"] == recs[("michel", "prune-only")]["scores"]
    # the recover cell reuses the prune-only result (no second pruning pass) but still counts its cost
    assert (recs[("michel", "prune+recover")]["cost"]["prune_wall_s"]
            == recs[("michel", "prune-only")]["cost"]["prune_wall_s"])
    assert recs[("original", "control")]["heads_pruned"] == 0
    assert recs[("original", "control")]["predictions"] != recs[("original", "prune-only")]["predictions"] or \
        recs[("original", "control")]["cost"]["backward_examples"] > 0


def test_every_mask_is_evaluated_on_the_base_weights_and_own_weights_are_a_separate_row(tmp_path, glue_dir):
    """Protocol 2 (§4): a method that re-trains gets the same base weights and recovery as every other method in
    prune-only and prune+recover, so with the same mask it scores exactly as a method that does not re-train; its
    own weights are the separate own-fine-tuning row."""
    _run(tmp_path, glue_dir, methods_spec="test-self-budgeted,test-retrains", tasks_spec="wnli", recover=True)
    recs = {(r["method"], r["condition"]): r for r in RecordStore(tmp_path).records()}
    assert set(recs) == {("original", "prune-only"), ("original", "control"),
                         ("test-self-budgeted", "prune-only"), ("test-self-budgeted", "prune+recover"),
                         ("test-retrains", "prune-only"), ("test-retrains", "prune+recover"),
                         ("test-retrains", "own-fine-tuning")}
    for condition, weights in (("prune-only", "base"), ("prune+recover", "base+recovery")):
        same, retrains = recs[("test-self-budgeted", condition)], recs[("test-retrains", condition)]
        assert retrains["mask"] == same["mask"]
        assert retrains["predictions"] == same["predictions"] and retrains["metrics"] == same["metrics"], condition
        assert retrains["weights"] == same["weights"] == weights and not retrains["retrained"]
    own = recs[("test-retrains", "own-fine-tuning")]
    assert own["weights"] == "own" and own["retrained"] and own["mask"] == recs[("test-retrains", "prune-only")]["mask"]
    assert set(read_ids(own["predictions"])) == {0} != \
        set(read_ids(recs[("test-retrains", "prune-only")]["predictions"]))
    assert own["cost"]["prune_wall_s"] == recs[("test-retrains", "prune-only")]["cost"]["prune_wall_s"]  # reused
    assert all(r["layers_emptied"] == 0 and r["schema"] == SCHEMA for r in recs.values())


def test_a_resumed_run_recovers_the_stored_mask_and_prunes_again_only_for_own_weights(tmp_path, glue_dir):
    """A run that stopped after a method's prune-only cell, resumed with the default conditions: the prune+recover
    cell recovers the stored prune-only mask without pruning again; the own-fine-tuning cell needs the method's
    weights, so it prunes once more (the same mask here: same process, same threads, so no warning)."""
    CountsPrunes.calls = 0
    _run(tmp_path, glue_dir, methods_spec="test-counts-prunes", tasks_spec="wnli", recover=False)
    assert CountsPrunes.calls == 1  # the own-fine-tuning cell reused the prune-only cell's prune step
    records = tmp_path / "records.jsonl"
    lines = records.read_text().splitlines()
    records.write_text("".join(l + "\n" for l in lines if '"own-fine-tuning"' not in l))  # as if stopped there
    CountsPrunes.calls = 0
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*chose another mask")  # a mask unlike the stored one warns
        _run(tmp_path, glue_dir, methods_spec="test-counts-prunes", tasks_spec="wnli", recover=True)
    assert CountsPrunes.calls == 1  # own-fine-tuning pruned again; prune+recover reused the stored record
    recs = {r["condition"]: r for r in RecordStore(tmp_path).records() if r["method"] == "test-counts-prunes"}
    assert set(recs) == {"prune-only", "prune+recover", "own-fine-tuning"}
    assert recs["prune+recover"]["mask"] == recs["prune-only"]["mask"] == recs["own-fine-tuning"]["mask"]
    assert recs["prune+recover"]["trace"] == recs["prune-only"]["trace"]
    assert "mask_differs_from_prune_only" not in recs["own-fine-tuning"]["trace"]


def test_a_folder_of_the_first_protocol_is_refused(tmp_path, glue_dir):
    Runner(_config(tmp_path, glue_dir, tasks_spec="wnli")).close()
    stored = json.loads((tmp_path / "run.json").read_text())
    del stored["experiment"]["protocol"]  # as run.json was written before protocol 2
    (tmp_path / "run.json").write_text(json.dumps(stored))
    with pytest.raises(ConfigError, match=r"protocol: 1 \(this folder predates the protocol version\) -> 2"):
        Runner(_config(tmp_path, glue_dir, tasks_spec="wnli"))


def test_a_per_layer_floor_is_applied_to_every_method_alike(tmp_path, glue_dir):
    """--min-heads-per-layer moves any method's mask after it prunes: the same count, every layer keeps the floor,
    the best-scored heads come back; the budget says so in the cell key (an unreachable floor is refused first: the
    next test)."""
    _run(tmp_path, glue_dir, methods_spec="test-empties-layer,random", tasks_spec="wnli", recover=False,
         min_heads_per_layer=2)
    recs = {r["method"]: r for r in RecordStore(tmp_path).records()}
    empties, rnd = recs["test-empties-layer"], recs["random"]
    assert empties["heads_pruned"] == 12 and empties["layers_emptied"] == 0
    assert empties["mask"][0] == [0] * 10 + [1, 1]  # heads 10 and 11 of layer 0 scored highest there
    assert empties["trace"]["layer_floor"] == {"min_heads": 2, "restored": [[0, 11], [0, 10]],
                                               "pruned_instead": [[1, 0], [1, 1]]}
    assert empties["mask"][1][:2] == [0, 0]  # the lowest-scored heads elsewhere were pruned instead
    assert empties["budget"]["spec"] == rnd["budget"]["spec"] == "fraction:0.3/floor:2"
    assert "|fraction:0.3/floor:2|" in rnd["cell"] and all(sum(row) >= 2 for row in rnd["mask"])


@pytest.mark.parametrize("bad, message, opens_runner", [
    (13, "the model has 12 heads per layer", True),
    (9, "cannot prune 22 of 72 heads", True),
    (-1, "expected 0", False),  # refused by the configuration alone
], ids=["above-the-heads-per-layer", "budget-cannot-keep-it", "negative"])
def test_an_unreachable_per_layer_floor_is_refused_before_any_cell(tmp_path, glue_dir, bad, message, opens_runner):
    with pytest.raises(ConfigError, match=message):
        config = _config(tmp_path / "other", glue_dir, min_heads_per_layer=bad)
        if opens_runner:
            Runner(config)


def test_own_budget_method_runs_once_for_every_budget(tmp_path, glue_dir):
    OwnBudget.calls = 0
    _run(tmp_path, glue_dir, methods_spec="random,test-own-budget", tasks_spec="wnli", budget="fraction:0.5")
    _run(tmp_path, glue_dir, methods_spec="random,test-own-budget", tasks_spec="wnli", budget="matched:test-own-budget")
    assert OwnBudget.calls == 1  # the second run reused the cell as the budget setter
    recs = RecordStore(tmp_path).records()
    own = [r for r in recs if r["method"] == "test-own-budget"]
    assert len(own) == 1 and own[0]["budget"]["spec"] == "own" and own[0]["budget"]["target"] is None
    assert own[0]["cell"].split("|")[3] == "own"
    by_budget = {r["budget"]["spec"]: r for r in recs if r["method"] == "random"}
    assert set(by_budget) == {"fraction:0.5", "matched:test-own-budget"}
    assert by_budget["fraction:0.5"]["heads_pruned"] == 36
    assert by_budget["matched:test-own-budget"]["heads_pruned"] == own[0]["heads_pruned"] == 7


def test_cli_list():
    res = CliRunner().invoke(main, ["list"])
    assert res.exit_code == 0 and "michel" in res.output and "glue-small" in res.output and "smoke" in res.output
    presets = res.output.split("presets:")[1]
    assert "auber: episodes=150" in presets  # the quick preset's sizing is shown, not only the defaults
    families = res.output.split("model families (--model):")[1].split("presets:")[0]
    assert "roberta, xlm-roberta" in families
    assert "deberta-v2     model types: deberta-v2; attention: eager\n" in families


@pytest.mark.parametrize("extra, message", [
    pytest.param(["--tasks", "mrcp"], "did you mean 'mrpc'", id="task-typo"),
    pytest.param(["--methods", "michell"], "did you mean 'michel'", id="method-typo"),
    pytest.param(["--budget", "heads:x"], "K must be a non-negative integer", id="budget-heads-not-int"),
    pytest.param(["--budget", "fraction:1.5"], "F must be in [0, 1]", id="budget-fraction-above-1"),
    pytest.param(["--budget", "matched:random", "--methods", "michel"], "random itself needs a head count",
                 id="budget-matched-to-a-method-that-needs-one"),
    pytest.param(["--budget", "matched:test-self-budgeted", "--methods", "michel"],
                 "add test-self-budgeted to --methods", id="budget-setter-not-in-methods"),
    pytest.param(["--option", "michel.mode"], "expected METHOD.OPTION=VALUE", id="option-without-value"),
    pytest.param(["--option", "michel.bogus=1"], "unknown option", id="option-unknown"),
    pytest.param(["--seeds", "a,b"], "expected N or a comma-separated list", id="seeds-not-numbers"),
    pytest.param(["--seeds", "0"], "for seed 0 alone write --seeds 1", id="seeds-zero"),
    pytest.param(["--device", "tpu"], "expected auto, cpu, cuda", id="device"),
    pytest.param(["--data-dir", "{tmp}/nowhere"], "nowhere", id="data-dir-missing"),
    # checked before any fine-tuning starts
    pytest.param(["--budget", "heads:500"], "the model has 72 heads", id="budget-above-the-models-heads"),
    pytest.param(["--option", "michel.mode=iterativ", "--methods", "michel"], "michel: option mode must be one of",
                 id="option-value-not-allowed"),
    pytest.param(["--option", "michel.mode=iterative", "--methods", "random"], "method 'michel' is not in --methods",
                 id="option-for-a-method-not-run"),
    pytest.param(["--model", "{tmp}/no-model-here"], "no model folder there", id="model-folder-missing"),
])
def test_cli_refuses_bad_options_before_making_a_run_folder(extra, message, glue_dir, tmp_path):
    """Each bad option is refused with its message, and no run folder is left behind ({tmp}: this test's
    tmp_path)."""
    extra = [arg.replace("{tmp}", str(tmp_path)) for arg in extra]
    res = CliRunner().invoke(main, ["run", "--preset", "smoke", "--out", str(tmp_path / "o"),
                                    "--data-dir", str(glue_dir), *extra])
    assert res.exit_code != 0, extra
    assert message in res.output, (extra, res.output)
    assert not (tmp_path / "o").exists(), f"{extra}: a refused run left a run folder behind"


def test_under_a_matched_budget_only_methods_that_match_it_wait_for_its_setter(glue_dir, tmp_path):
    """`matched:auber`: random's cells take AUBER's prune-only record (and wait for it on Ray); auber-null decides
    its own count like AUBER, so it neither takes nor waits for it and the two long searches can run side by side."""
    runner = Runner(_config(tmp_path / "run", glue_dir, methods_spec="random,auber,auber-null", tasks_spec="wnli",
                            budget="matched:auber"))
    try:
        work = runner.work
        assert [work.takes_setter(m) for m in ("original", "random", "auber", "auber-null")] == [False, True, False,
                                                                                                  False]
    finally:
        runner.close()
    plain = Runner(_config(tmp_path / "plain", glue_dir, methods_spec="random,auber", tasks_spec="wnli"))
    try:
        assert not any(plain.work.takes_setter(m) for m in ("original", "random", "auber"))
    finally:
        plain.close()


def test_the_runner_is_the_ray_loops_typed_handle_and_plans_cell_keys(smoke_run, glue_dir):
    from headprune_bench.benchmark.execution.ray.driver import RunHandle
    from headprune_bench.benchmark.run.runner import Runner
    from headprune_bench.benchmark.store.records import CellKey

    runner = Runner(_config(smoke_run, glue_dir))
    assert isinstance(runner, RunHandle)
    missing = [name for name in RunHandle.__annotations__ if not hasattr(runner, name)]
    assert missing == []
    planned = runner.planned_cells()
    assert all(isinstance(c, CellKey) for c in planned)
    assert [str(c) for c in planned] == [r["cell"] for r in RecordStore(smoke_run).records()]


def test_a_resumed_command_says_what_its_plan_adds(tmp_path, glue_dir, capsys):
    """Issue 42, item 10: after a plugin was installed, the same `--methods all` command planned more cells without
    a word. Now the run says which methods the same command's last plan lacked, with their cell counts."""
    import sys

    from headprune_bench.benchmark.run.runner import plan_change
    from headprune_bench.benchmark.store.jsonl import RecordStore

    assert plan_change([], ["random"], []) is None
    RecordStore(tmp_path).add_plan({"started": "2026-12-05T00:00:00+00:00", "argv": sys.argv[1:],
                                    "methods": ["random"], "cells": ["a", "b"]})
    run_smoke(tmp_path, glue_dir, methods_spec="random,confidence")
    err = capsys.readouterr().err
    assert ("the same command planned 2 cells on 2026-12-05T00:00:00+00:00; this plan adds the method(s) "
            "confidence (1 cells)") in err
    run_smoke(tmp_path, glue_dir, methods_spec="random,confidence")  # the same plan again: nothing to say
    assert "the same command planned" not in capsys.readouterr().err


def test_a_running_method_shows_its_progress_on_screen_under_its_own_name(tmp_path, glue_dir, capsys):
    """Issue 42, item 9: AUBER's per-layer progress went to run.log only, and auber-null's lines said "auber:"."""
    run_smoke(tmp_path, glue_dir, methods_spec="auber-null",  # (no fine-tunes, one episode: CI time)
              method_options={"auber-null": {"episodes": 1, "layer_finetune_epochs": 0.0, "final_finetune": False}})
    err = capsys.readouterr().err
    assert "bench run: 2 cells planned, 2 to do" in err  # original, auber-null prune-only (nothing fine-tuned)
    assert "[wnli s0] auber-null: layer 0 (1 of 6): 1 episodes" in err and "auber-null: layer 5: pruned" in err
    assert "] auber: " not in err and "] auber: " not in (tmp_path / "run.log").read_text()
