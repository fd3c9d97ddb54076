"""Reliability on another machine and in a new user's hands (issue 10): a changed local model, unreadable lines in
the result files, options checked before any training, averages and baselines that cannot mislead, quiet
fallbacks and OS errors, one config hash per folder, complete model folders.

Float tolerances (item 1) are in ``tests/methods/test_heads.py`` and ``tests/tolerances.py``; statistics on
differences equal up to rounding (item 5) in ``tests/benchmark/stats/test_stats.py``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from fakes import SelfBudgeted, Unchecked
from smoke_runs import negate_classifier, run_smoke, smoke_config, smoke_run_args, stable
from synthetic_runs import make_records, write_run  # synthetic records shaped like the runner's

from headprune_bench.benchmark import tasks
from headprune_bench.benchmark.cli import main
from headprune_bench.benchmark.config.presets import ConfigError, get_preset
from headprune_bench.benchmark.config.run import MAX_SEED_COUNT, parse_seeds
from headprune_bench.benchmark.models import local_model_digest, model_revision
from headprune_bench.benchmark.report import ReportWarning, build_report
from headprune_bench.benchmark.report.summary import markdown, summarize
from headprune_bench.benchmark.run.runner import Runner
from headprune_bench.benchmark.store import jsonl as store_mod
from headprune_bench.benchmark.store.jsonl import REJECTED, RecordStore, append_jsonl, scan_jsonl
from headprune_bench.benchmark.store.records import BASE_DIFFERS, read_ids
from headprune_bench.methods import Interval, OptionError
from headprune_bench.methods.conformance import check_option_constraints
from headprune_bench.methods.registry import shipped_methods

_config, _run, _stable = smoke_config, run_smoke, stable


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, glue_dir):
    """One smoke run (WNLI, seed 0, original + random): a cached base model and two records."""
    out = tmp_path_factory.mktemp("smoke")
    _run(out, glue_dir)
    return out


def _tiny_bert_folder(folder: Path, seed: int = 0) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=64, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------- 2. a changed local model


def test_local_model_revision_identifies_its_content(tmp_path):
    a = _tiny_bert_folder(tmp_path / "a")
    shutil.copytree(a, tmp_path / "b")
    assert model_revision(str(a)) == model_revision(str(tmp_path / "b")) == f"local:sha256={local_model_digest(a)}"
    (a / "README.md").write_text("notes")  # not content: the revision stays
    assert model_revision(str(a)) == model_revision(str(tmp_path / "b"))
    _tiny_bert_folder(a, seed=1)  # other weights, same config
    assert model_revision(str(a)) != model_revision(str(tmp_path / "b"))
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    (tmp_path / "b" / "config.json").write_text(json.dumps({**config, "hidden_dropout_prob": 0.2}))
    before = model_revision(str(tmp_path / "b"))
    (tmp_path / "b" / "config.json").write_text(json.dumps(config))
    assert model_revision(str(tmp_path / "b")) != before


def test_a_changed_local_model_is_refused_in_its_run_folder(tmp_path, glue_dir):
    model = _tiny_bert_folder(tmp_path / "model")
    Runner(_config(tmp_path / "run", glue_dir, model=str(model))).close()
    Runner(_config(tmp_path / "run", glue_dir, model=str(model), seeds="2")).close()  # unchanged: accepted
    _tiny_bert_folder(model, seed=1)  # overwrite model.safetensors in place
    with pytest.raises(ConfigError, match=r"different configuration(.|\n)*model_revision: 'local:sha256=\w+' -> "
                                          r"'local:sha256=\w+'"):
        Runner(_config(tmp_path / "run", glue_dir, model=str(model), seeds="2"))


# --------------------------------------------------------------------------- 3. unreadable lines


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


@pytest.mark.parametrize("damage, line, reason", [
    ("garbage", 3, "not valid JSON"),
    ("cut in the middle", 3, "not valid JSON"),
    ("cut-off last line", 12, "incomplete last line (an interrupted write)"),
    ("not a record", 3, "not a record"),
    ("a mask of the wrong shape", 3, "not a record (mask of rows [3] does not hold heads_total = "),
])
def test_report_and_run_name_every_unreadable_line_and_agree(tmp_path, damage, line, reason):
    """Issue 42, item 4 among them: valid JSON whose mask is not the model's (``[[1, 0, 1]]``) used to count as
    its ``heads_pruned`` and as a finished cell."""
    records = make_records(tasks=("mrpc",), seeds=(0, 1, 2), methods={"original": ["none"],
                                                                       "random": ["fraction:0.25"],
                                                                       "michel": ["fraction:0.25"],
                                                                       "auber": ["own"]})
    folder = write_run(tmp_path / "run", records)
    path = folder / "records.jsonl"
    lines = _lines(path)
    assert len(lines) == 12
    victim = records[line - 1]["cell"]
    if damage == "garbage":
        lines[line - 1] = "%%% not json %%%\n"
    elif damage == "cut in the middle":
        lines[line - 1] = lines[line - 1][:200] + "\n"
    elif damage == "not a record":
        lines[line - 1] = "[1, 2, 3]\n"
    elif damage == "a mask of the wrong shape":
        lines[line - 1] = json.dumps({**json.loads(lines[line - 1]), "mask": [[1, 0, 1]]}) + "\n"
    else:
        lines[-1] = lines[-1][:150]  # no newline: an interrupted write
    path.write_text("".join(lines))

    with pytest.warns(ReportWarning,
                      match=rf"records.jsonl: line {line}: {re.escape(reason)}.*skipped.*next `bench run`"):
        out = build_report([folder], plots=False, echo=False, n_boot=200, n_boot_examples=50)
    md = (out / "report.md").read_text()
    assert "Records: 11; 1 unreadable line(s) skipped" in md
    assert f"`{path}` line {line}: {reason}" in md
    missing = pd.read_csv(out / "missing.csv")
    assert len(missing) == 1 and victim.startswith(f"{missing.task[0]}|seed={missing.seed[0]}|{missing.method[0]}|")

    # the writer's view (what `bench run` opens): the line is moved aside, kept verbatim, the rest untouched
    kept = [l for i, l in enumerate(lines) if i != line - 1]
    store = RecordStore(folder)
    assert [b.line for b in store.rejected] == [line]
    assert store.rejected[0].reason.startswith(reason if reason != "not a record" else "not a record (not a JSON")
    assert victim not in store and len(store.records()) == 11
    assert path.read_text() == "".join(kept if damage != "cut-off last line" else kept)
    rejected = [json.loads(l) for l in (folder / REJECTED).read_text().splitlines()]
    assert rejected[0]["file"] == "records.jsonl" and rejected[0]["line"] == line
    assert rejected[0]["text"] == lines[line - 1].rstrip("\n")
    # afterwards both agree there is nothing unreadable
    assert scan_jsonl(path)[1] == []


def test_a_rerun_recomputes_a_record_cut_in_the_middle(smoke, glue_dir, tmp_path, capsys):
    """The issue's case: `bench report` lists the cell as missing and says "rerun the command"; the rerun now does
    exactly that instead of refusing the folder."""
    folder = tmp_path / "copy"
    shutil.copytree(smoke, folder)
    before = _stable(RecordStore(smoke).records())
    lines = _lines(folder / "records.jsonl")
    assert len(lines) == 2
    (folder / "records.jsonl").write_text(lines[0][:300] + "\n" + lines[1])  # the first record, cut in half
    runner = _run(folder, glue_dir)
    assert "records.jsonl: line 1: not valid JSON" in capsys.readouterr().err
    assert _stable(RecordStore(folder).records()) == before  # recomputed, equal to the original
    assert json.loads((folder / REJECTED).read_text())["text"] == lines[0][:300]
    assert runner.store.rejected and runner.store.rejected[0].line == 1


def test_an_append_waiting_for_the_lock_follows_a_replaced_file(tmp_path, monkeypatch):
    """A repair replaces records.jsonl (rename) while another process waits for the lock on the old file: its
    line must land in the new file, not in the unlinked old one."""
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"cell": "a"}) + "\n")
    real = store_mod.file_lock
    replaced = []

    @contextmanager
    def racing(fd, shared=False):
        if not replaced:  # the repair happens while this appender waits for the lock
            replaced.append(True)
            (tmp_path / "new").write_text(json.dumps({"cell": "a"}) + "\n")
            os.replace(tmp_path / "new", path)
        with real(fd, shared):
            yield

    monkeypatch.setattr(store_mod, "file_lock", racing)
    append_jsonl(path, {"cell": "b"})
    assert [json.loads(l)["cell"] for l in path.read_text().splitlines()] == ["a", "b"]


# --------------------------------------------------------------------------- 4. options checked before training


def test_seeds_take_a_count_a_list_or_inclusive_ranges():
    """``N`` is a count; a list names seeds, and ``a-b`` items name inclusive ranges, so that one seed other than 0
    can be run alone (``5-5``): a resumed run restricted to the seeds it can finish."""
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds(" 0,4 ") == [0, 4]
    assert parse_seeds("5-5") == [5] and parse_seeds("3-6") == [3, 4, 5, 6] and parse_seeds("0, 7-8,2") == [0, 7, 8, 2]
    assert parse_seeds(f"1-{MAX_SEED_COUNT}") == list(range(1, MAX_SEED_COUNT + 1))


@pytest.mark.parametrize("bad, message", [
    ("6-5", "range 6-5 descends; write it 5-6"),
    ("5-", "not one: '5-'"),
    ("-5-6", "not one: '-5-6'"),
    ("1-3,3", "seed(s) 3 given more than once"),
    ("2-3-4", "not one: '2-3-4'"),
    (f"0-{MAX_SEED_COUNT}", f"at most {MAX_SEED_COUNT} seeds"),
    ("0-999999999999", f"at most {MAX_SEED_COUNT} seeds"),
    ("2147483647-2147483648", "every seed must be an integer in [0, 2147483647]"),
], ids=["descending", "open-end", "negative-start", "repeated", "three-ends", "too-many", "far-too-many",
        "beyond-int32"])
def test_bad_seed_ranges_are_refused(bad, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_seeds(bad)


@pytest.mark.parametrize("extra, message", [
    (["--seeds", "-1"], "expected N or a comma-separated list of non-negative integers"),
    (["--seeds", "1,-2"], "not one: '-2'"),
    (["--seeds", "1,1"], "seed(s) 1 given more than once"),
    (["--seeds", ","], "not one: '', ''"),
    (["--seeds", "1,,2"], "not one: ''"),
    (["--seeds", "1_0"], "in plain digits"),
    (["--seeds", "2147483647"], "N is a count (seeds 0..N-1) and must be in [1, 1000]"),
    (["--seeds", "0,2147483648"], "every seed must be an integer in [0, 2147483647]"),
    (["--methods", "michel", "--option", "michel.step_fraction=0"], "michel: option step_fraction must be in (0, 1]"),
    (["--methods", "voita", "--option", "voita.gamma=0.5"], "voita: option gamma must be < 0, got 0.5"),
    (["--methods", "dsp", "--option", "dsp.tau0=0"], "dsp: option tau0 must be > 0"),
    (["--methods", "redundancy", "--option", "redundancy.seq_length=2"], "option seq_length must be >= 3"),
    (["--methods", "auber", "--option", "auber.dqn_batch_size=10", "--option", "auber.replay_capacity=5"],
     "dqn_batch_size (10) must not exceed replay_capacity (5)"),
    (["--methods", "confidence", "--option", "confidence.batch_size=0"], "option batch_size must be >= 1"),
    (["--methods", "random", "--match-per-layer"], "--match-per-layer matches a budget setter's per-layer counts"),
    (["--methods", "random", "--option", "random.min_heads_per_layer=13"],
     "option min_heads_per_layer (13) exceeds the model's 12 heads per layer"),
    (["--methods", "confidence", "--option", "confidence.min_heads_per_layer=12"],
     "option min_heads_per_layer=12 cannot be met: cannot prune 22 of 72 heads while keeping 12 in each of 6"),
    (["--methods", "redundancy", "--option", "redundancy.seq_length=100000"],
     "option seq_length (100000) exceeds the 512 tokens the model's position embeddings take"),
])
def test_bad_seeds_and_option_ranges_are_refused_before_any_training(glue_dir, tmp_path, extra, message):
    res = CliRunner().invoke(main, [*smoke_run_args(), "--tasks", "wnli", "--out", str(tmp_path / "o"),
                                    "--data-dir", str(glue_dir), *extra])
    assert res.exit_code != 0 and message in res.output, res.output
    assert any(name in res.output for name in ("--seeds", "option", "--match-per-layer"))
    assert not (tmp_path / "o").exists()  # refused before the folder, the base fine-tune or runs.jsonl


@pytest.mark.parametrize("name", sorted(shipped_methods()))
def test_every_registered_method_declares_and_enforces_its_option_ranges(name):
    check_option_constraints(name)


def test_conformance_catches_an_option_without_a_declared_range(monkeypatch):
    with pytest.raises(AssertionError, match="option 'passes' .*has no declared constraint"):
        check_option_constraints("test-unchecked-option")
    monkeypatch.setattr(Unchecked, "constraints", {"passes": Interval(1, None)})
    check_option_constraints("test-unchecked-option")
    with pytest.raises(OptionError, match=r"test-unchecked-option: option passes must be >= 1, got 0"):
        Unchecked(passes=0)


def test_interval_membership_and_wording():
    assert 0 in Interval(0, 1) and 1 in Interval(0, 1) and 0 not in Interval(0, 1, closed="right")
    assert 1 not in Interval(0, 1, closed="left") and float("nan") not in Interval() and True not in Interval()
    assert str(Interval(0, 1, closed="right")) == "in (0, 1]" and str(Interval(None, 0, closed="neither")) == "< 0"
    assert str(Interval(1, None)) == ">= 1"


# --------------------------------------------------------------------------- 6. averages and baselines


def test_cross_task_average_leaves_out_base_failed_pairs(tmp_path):
    failed = {("cola", s, "original") for s in (0, 1, 2)} | {("rte", 1, "original")}
    records = make_records(tasks=("mrpc", "cola", "rte"), seeds=(0, 1, 2),
                           methods={"original": ["none"], "michel": ["fraction:0.5"]}, degenerate=failed)
    out = build_report([write_run(tmp_path / "run", records)], plots=False, echo=False, n_boot=300,
                       n_boot_examples=50)
    summ = pd.read_csv(out / "summary.csv").set_index("method")

    def mean(task, method, seeds):
        return 100 * np.mean([r["score"] for r in records if r["task"] == task and r["method"] == method
                              and r["seed"] in seeds])

    for method in ("original", "michel"):
        assert np.isnan(summ.loc[method, "cola"])  # every CoLA base failed: no number, not a 0.00
        assert summ.loc[method, "rte"] == pytest.approx(mean("rte", method, (0, 2)))
        assert summ.loc[method, "mean_excl_wnli"] == pytest.approx(
            (mean("mrpc", method, (0, 1, 2)) + mean("rte", method, (0, 2))) / 2)
        assert summ.loc[method, "tasks"] == 2
    diffs = [100 * (a["score"] - b["score"]) for a in records for b in records
             if a["method"] == "michel" and b["method"] == "original" and a["task"] == b["task"] == "rte"
             and a["seed"] == b["seed"] != 1]
    assert summ.loc["michel", "rte_diff_vs_original"] == pytest.approx(np.mean(diffs))
    md = (out / "report.md").read_text()
    summary = md[md.index("## Cross-task summary"):md.index("## All comparisons")]
    assert "— (base failed)" in summary
    assert "CoLA: base model failed on 3 of 3 seed(s) (0, 1, 2), left out of every number of this table; no seed " \
           "is left, so the task is not averaged" in summary
    assert "RTE: base model failed on 1 of 3 seed(s) (1)" in summary


def test_majority_baseline_cannot_point_the_wrong_way_on_a_subsample(glue_dir):
    """The issue's smoke WNLI: the 64-example train sample's majority is class 1 (37 of 64) while the 64-example
    dev sample's is class 0 (36 of 64); the baseline is the dev majority's 56.25, not 43.75."""
    preset = get_preset("smoke")
    raw = tasks.load_task("wnli", glue_dir)
    train = raw["train"].shuffle(seed=12345).select(range(preset.max_train_examples))
    dev = raw["validation"].select(range(preset.max_dev_examples))
    baseline = tasks.majority_baseline("wnli", train["label"], dev["label"])
    assert baseline == {"majority_label": 0, "train_majority_label": 1, "accuracy": 36 / 64}


def test_majority_baseline_is_the_best_constant_prediction():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        gold = rng.integers(0, 2, n)
        train = rng.integers(0, 2, int(rng.integers(1, 40)))
        base = tasks.majority_baseline("rte", train, gold)
        best = max(np.mean(gold == c) for c in (0, 1))
        assert base["accuracy"] == pytest.approx(best)
        assert tasks.majority_baseline("cola", train, gold)["matthews_correlation"] == 0.0
    assert tasks.majority_baseline("rte", [1, 1, 1], [0, 1, 1, 0])["majority_label"] == 0  # tie: smaller id


def test_off_budget_rows_are_flagged_in_every_table(tmp_path):
    records = make_records(tasks=("mrpc",), seeds=(0, 1, 2), methods={"original": ["none"],
                                                                     "voita": ["fraction:0.25"],
                                                                     "random": ["fraction:0.25"]})
    for r in records:  # voita reached 0 heads on two seeds while asked for 2 (smoke: gates that cannot close)
        if r["method"] == "voita" and r["seed"] in (0, 1):
            r["heads_pruned"] = r["budget"]["achieved"] = 0
            r["mask"] = [[1] * 4, [1] * 4]
    out = build_report([write_run(tmp_path / "run", records)], plots=False, echo=False, n_boot=200,
                       n_boot_examples=50)
    md = (out / "report.md").read_text()
    voita = next(l for l in md.splitlines() if l.startswith("| voita "))
    random_row = next(l for l in md.splitlines() if l.startswith("| random "))
    assert "0.7/8 ⚠ target 2, missed on 2/3 seeds" in voita and "⚠" not in random_row
    scores = pd.read_csv(out / "scores.csv").set_index("method")
    assert scores.loc["voita", "off_budget"] == 2 and scores.loc["random", "off_budget"] == 0
    table = summarize(records)
    assert table.set_index("method").loc["voita", "off_budget"] == 2
    assert "⚠ target missed on 2/3 seeds" in markdown(table)


# --------------------------------------------------------------------------- 7. quiet fallbacks and OS errors


def test_an_empty_glue_dir_or_data_dir_is_refused(monkeypatch, glue_dir, tmp_path):
    monkeypatch.setenv("GLUE_DIR", "")
    with pytest.raises(tasks.DataError, match="GLUE_DIR is set but empty"):
        tasks.resolve_data_dir()
    with pytest.raises(tasks.DataError, match="--data-dir is empty"):
        tasks.resolve_data_dir("  ")
    res = CliRunner().invoke(main, [*smoke_run_args(), "--tasks", "wnli", "--methods", "random",
                                    "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "GLUE_DIR is set but empty" in res.output
    assert not (tmp_path / "o").exists()
    monkeypatch.delenv("GLUE_DIR")
    assert tasks.describe_data_source(None).startswith("the Hugging Face hub")
    assert tasks.describe_data_source(str(glue_dir)) == f"{glue_dir} (--data-dir)"
    monkeypatch.setenv("GLUE_DIR", str(glue_dir))
    assert tasks.describe_data_source(None) == f"{glue_dir} ($GLUE_DIR)"
    # the first line a run prints says where the tasks come from (here it then stops on a bad --model)
    res = CliRunner().invoke(main, [*smoke_run_args(), "--tasks", "wnli", "--methods", "random",
                                    "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o")])
    assert res.output.splitlines()[0] == f"bench run: tasks wnli from {glue_dir} ($GLUE_DIR)"


def test_an_unwritable_base_folder_gives_one_line_and_a_consistent_folder(glue_dir, tmp_path):
    out = tmp_path / "run"
    args = [*smoke_run_args(), "--tasks", "wnli", "--methods", "random", "--out", str(out),
            "--data-dir", str(glue_dir), "--no-progress", "--no-report"]
    Runner(_config(out, glue_dir)).close()
    (out / "base").write_text("a file where the base models' folder should be")  # as root, chmod would not stop us
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    error = [l for l in res.output.splitlines() if l.startswith("Error:")]
    assert len(error) == 1 and "Traceback" not in res.output
    assert f"{out / 'base' / 'wnli-seed0'}: cannot save the fine-tuned base model" in error[0]
    assert "every finished cell is kept" in error[0] and "rerun the same command" in error[0]
    assert "cannot save the fine-tuned base model" in (out / "run.log").read_text()
    assert not (out / "records.jsonl").exists() or (out / "records.jsonl").read_text() == ""
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp")) == []
    (out / "base").unlink()  # fixed: the rerun resumes
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    # the CLI's default conditions: original (prune-only, control), random (prune-only, prune+recover)
    assert sorted((r["method"], r["condition"]) for r in RecordStore(out).records()) == [
        ("original", "control"), ("original", "prune-only"), ("random", "prune+recover"), ("random", "prune-only")]


def test_processes_sharing_a_new_folder_agree_on_one_config_hash(glue_dir, tmp_path):
    # one after the other: the second task joins the folder without changing its hash
    seq = tmp_path / "seq"
    first = Runner(_config(seq, glue_dir, tasks_spec="wnli"))
    first.close()
    second = Runner(_config(seq, glue_dir, tasks_spec="rte"))
    second.close()
    assert first.config_hash == second.config_hash == json.loads((seq / "run.json").read_text())["config_hash"]
    # started together (threads stand in for processes: flock locks per open file, not per process)
    together = tmp_path / "together"
    runners: dict[str, Runner] = {}
    errors: list[BaseException] = []

    def start(task):
        try:
            runners[task] = Runner(_config(together, glue_dir, tasks_spec=task))
            runners[task].close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(t,)) for t in ("wnli", "rte", "mrpc")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    stored = json.loads((together / "run.json").read_text())
    assert {r.config_hash for r in runners.values()} == {stored["config_hash"]} == {first.config_hash}
    assert {f.split("/")[0] for f in stored["experiment"]["data_hashes"]} == {"wnli", "rte", "mrpc"}


def test_the_cached_base_folder_is_a_complete_hugging_face_folder(smoke):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = smoke / "base" / "wnli-seed0"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    batch = tokenizer(["a premise", "a hypothesis"], return_tensors="pt", padding=True)
    assert model(**batch).logits.shape == (2, 2)
    assert tokenizer("The cat sat.")["input_ids"] == AutoTokenizer.from_pretrained(
        tasks_model_path())("The cat sat.")["input_ids"]


def tasks_model_path() -> str:
    from headprune_bench.benchmark.models import resolve_model

    return resolve_model("minilm-l6")


def test_save_pruned_writes_the_tokenizer_too(tmp_path):
    from transformers import AutoTokenizer

    from headprune_bench.methods.heads import load_pruned, remove_heads, save_pruned

    tokenizer = AutoTokenizer.from_pretrained(tasks_model_path())
    model = make_tiny()
    remove_heads(model, torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]))
    save_pruned(model, tmp_path, tokenizer=tokenizer)
    assert AutoTokenizer.from_pretrained(tmp_path)("hello")["input_ids"] == tokenizer("hello")["input_ids"]
    assert load_pruned(tmp_path) is not None


def make_tiny():
    from headprune_bench.methods.conformance import tiny_model

    return tiny_model(num_hidden_layers=2)


def test_bench_report_into_an_unwritable_folder_is_one_line(tmp_path):
    run = write_run(tmp_path / "run", make_records(tasks=("mrpc",), seeds=(0, 1)))
    (tmp_path / "blocked").write_text("a file where the report folder should be")
    res = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "blocked" / "report"), "--no-plots"])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    assert str(tmp_path / "blocked") in res.output


# --------------------------------------------------------------------------- found by a breaker after the first fixes


@pytest.mark.parametrize("line", [
    '{"cell": "CELL"}',  # a cell key and nothing else: once counted as done by the run, skipped by the report
    "SCORE_NULL", "SCORE_TEXT", "BUDGET_TEXT", "SEED_TEXT",
    '{"cell": ["x"]}',
    "[" * 5000 + "]" * 5000,
], ids=["cell-only", "score-null", "score-text", "budget-text", "seed-text", "cell-list", "deep-nesting"])
def test_record_like_lines_are_unreadable_to_run_and_report_alike(tmp_path, line):
    records = make_records(tasks=("mrpc",), seeds=(0, 1), methods={"original": ["none"], "random": ["fraction:0.25"]})
    victim = dict(records[1])
    bad = {"SCORE_NULL": dict(victim, score=None), "SCORE_TEXT": dict(victim, score="abc"),
           "BUDGET_TEXT": dict(victim, budget="x"), "SEED_TEXT": dict(victim, seed="abc")}
    text = json.dumps(bad[line]) if line in bad else line.replace("CELL", victim["cell"])
    folder = write_run(tmp_path / "run", records)
    lines = _lines(folder / "records.jsonl")
    lines[1] = text + "\n"
    (folder / "records.jsonl").write_text("".join(lines))
    with pytest.warns(ReportWarning, match=r"records.jsonl: line 2: .*skipped"):
        out = build_report([folder], plots=False, echo=False, n_boot=100, n_boot_examples=20)
    assert "line 2: not" in (out / "report.md").read_text()
    store = RecordStore(folder)  # the run's view agrees: the line is moved aside and its cell is to do
    assert [b.line for b in store.rejected] == [2] and victim["cell"] not in store and len(store.records()) == 3


@pytest.mark.parametrize("name, text", [("runs.jsonl", '{"cells": null}'), ("failures.jsonl", '{"cell": ["a"]}')])
def test_malformed_plan_and_failure_entries_are_named_not_a_traceback(tmp_path, name, text):
    folder = write_run(tmp_path / "run", make_records(tasks=("mrpc",), seeds=(0, 1)))
    (folder / name).write_text(text + "\n")
    with pytest.warns(ReportWarning, match=rf"{re.escape(name)}: line 1: not a"):
        build_report([folder], plots=False, echo=False, n_boot=100, n_boot_examples=20)
    assert [b.line for b in RecordStore(folder).rejected] == [1]


def test_rejected_lines_keep_bytes_that_are_not_utf8(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    raw = b"\xff\xfe not utf-8 \xc3"
    (folder / "records.jsonl").write_bytes(raw + b"\n")
    assert [b.line for b in RecordStore(folder).rejected] == [1]
    moved = json.loads((folder / REJECTED).read_text())
    import base64

    assert base64.b64decode(moved["bytes_base64"]) == raw


@pytest.mark.parametrize("extra, message", [
    (["--methods", "voita", "--option", "voita.lr=Infinity"], "voita: option lr must be >= 0, got inf"),
    (["--methods", "dsp", "--option", "dsp.epochs=Infinity"], "dsp: option epochs must be > 0, got inf"),
    (["--methods", "dsp", "--option", "dsp.tau_end=2000"], "tau_end (2000) must not exceed tau0 (1000)"),
])
def test_infinite_and_inconsistent_options_are_refused_before_training(glue_dir, tmp_path, extra, message):
    res = CliRunner().invoke(main, [*smoke_run_args(), "--tasks", "wnli", "--out", str(tmp_path / "o"),
                                    "--data-dir", str(glue_dir), *extra])
    assert res.exit_code != 0 and message in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_the_same_local_model_named_two_ways_is_one_model_and_other_files_do_not_count(tmp_path):
    from headprune_bench.benchmark.models import normalize_model

    model = _tiny_bert_folder(tmp_path / "m")
    assert normalize_model(str(model) + "/") == normalize_model(str(model)) == str(model.resolve())
    assert normalize_model("minilm-l6") == "minilm-l6"
    before = local_model_digest(model)
    (model / "notes.txt").write_text("notes")
    (model / "training_args.bin").write_bytes(b"\0\1")
    (model / "checkpoint-10").mkdir()
    (model / "checkpoint-10" / "config.json").write_text("{}")
    assert local_model_digest(model) == before


def test_processes_that_need_the_same_base_model_train_it_once(glue_dir, tmp_path):
    out = tmp_path / "run"
    errors: list[BaseException] = []

    def start(method):
        try:
            run_smoke(out, glue_dir, methods_spec=method)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(m,)) for m in ("random", "confidence")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    log_text = (out / "run.log").read_text()
    # threads share one logger, so each line may appear once per runner: count distinct lines
    assert len({line for line in log_text.splitlines() if "trained in" in line}) == 1  # one fine-tune ...
    assert "reusing base model" in log_text  # ... the other runner waited for it, then loaded it
    assert {r["method"] for r in RecordStore(out).records()} == {"original", "random", "confidence"}


def test_a_damaged_cached_base_model_says_to_delete_it(smoke, glue_dir, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(smoke, folder)
    (folder / "records.jsonl").write_text(_lines(folder / "records.jsonl")[0])  # the random cell is to do again
    weights = folder / "base" / "wnli-seed0" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100_000])
    res = CliRunner().invoke(main, [*smoke_run_args(), "--tasks", "wnli", "--methods", "random",
                                    "--out", str(folder), "--data-dir", str(glue_dir), "--no-progress", "--no-report"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "the cached base model cannot be loaded" in res.output and "delete that folder" in res.output


def test_a_clone_holding_only_the_base_models_train_info_trains_it_again(smoke, glue_dir, tmp_path):
    """git keeps ``base/*/train_info.json`` and ignores the weights: a clean clone resuming the run finds the
    folder without a model, fine-tunes the base model again and saves it over that folder."""
    folder = tmp_path / "copy"
    shutil.copytree(smoke, folder)
    original = json.loads(_lines(folder / "records.jsonl")[0])
    assert original["method"] == "original"
    # the random cell is to do again; the stored original record's 64 dev predictions inverted, so that the check
    # of the base model fine-tuned again against it can be seen: all 64 differ iff it predicts as the first one did
    original["predictions"] = [1 - p for p in read_ids(original["predictions"])]
    (folder / "records.jsonl").write_text(json.dumps(original) + "\n")
    base = folder / "base" / "wnli-seed0"
    for item in base.iterdir():
        if item.name != "train_info.json":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    old_info = json.loads((base / "train_info.json").read_text())
    assert sum("wnli-seed0 trained in" in line for line in (folder / "run.log").read_text().splitlines()) == 1
    res = CliRunner().invoke(main, [*smoke_run_args(), "--tasks", "wnli", "--methods", "random",
                                    "--out", str(folder), "--data-dir", str(glue_dir), "--no-progress", "--no-report"])
    assert res.exit_code == 0, res.output
    assert (base / "config.json").exists() and (base / "model.safetensors").exists()
    assert json.loads((base / "train_info.json").read_text()) != old_info  # written again (its own wall time)
    trained = [line for line in (folder / "run.log").read_text().splitlines() if "wnli-seed0 trained in" in line]
    assert len(trained) == 2  # the smoke run's fine-tune, then this one
    records = RecordStore(folder).records()
    assert {r["method"] for r in records} == {"original", "random"}
    # seeded, on the same thread count: the same model again, predicting every dev example as the first one did
    assert [r["trace"].get(BASE_DIFFERS) for r in records[1:]] == [64, 64, 64]  # control, random's two cells


def test_a_resumed_seed_on_another_base_model_is_warned_about_and_its_records_say_so(smoke, glue_dir, tmp_path):
    """Every cell but the original is to do again (the CLI adds the control and random's prune+recover cell), and
    the cached base model is no longer the one the stored original record evaluated (its classifier negated: all
    64 dev predictions flip). The run says so once, before the cells run (stderr and run.log); each new record
    carries the count in its trace, the stored original record is untouched, and bench report warns about the
    seed."""
    folder = tmp_path / "copy"
    shutil.copytree(smoke, folder)
    original = _lines(folder / "records.jsonl")[0]
    assert json.loads(original)["method"] == "original" and len(read_ids(json.loads(original)["predictions"])) == 64
    (folder / "records.jsonl").write_text(original)
    negate_classifier(folder / "base" / "wnli-seed0")
    res = CliRunner().invoke(main, [*smoke_run_args(), "--tasks", "wnli", "--methods", "random",
                                    "--out", str(folder), "--data-dir", str(glue_dir), "--no-progress", "--no-report"])
    assert res.exit_code == 0, res.output
    said = "wnli seed 0: the base model predicts 64 of 64 dev examples otherwise than the stored original record"
    assert said in res.output
    assert sum(said in line for line in (folder / "run.log").read_text().splitlines()) == 1
    records = RecordStore(folder).records()
    assert sorted((r["method"], r["condition"]) for r in records[1:]) == [
        ("original", "control"), ("random", "prune+recover"), ("random", "prune-only")]
    assert [r["trace"].get(BASE_DIFFERS) for r in records[1:]] == [64, 64, 64]
    assert _lines(folder / "records.jsonl")[0] == original
    with pytest.warns(ReportWarning, match=r"wnli seed 0: 3 record\(s\) were computed on a base model that predicts "
                                           r"64 dev example\(s\) otherwise than the seed's original record"):
        build_report([folder], plots=False, echo=False, n_boot=100, n_boot_examples=20)


def test_base_failed_comes_from_the_base_model_when_the_original_cell_failed(smoke, glue_dir, tmp_path, monkeypatch):
    folder = tmp_path / "copy"
    shutil.copytree(smoke, folder)
    original = json.loads(_lines(folder / "records.jsonl")[0])
    assert original["method"] == "original"
    (folder / "records.jsonl").write_text("")
    real = Runner._run_cell

    def failing_original(self, bench, method, condition, inputs, level=None):
        if method == "original":
            raise RuntimeError("the original cell failed")
        return real(self, bench, method, condition, inputs, level)

    monkeypatch.setattr(Runner, "_run_cell", failing_original)
    runner = Runner(_config(folder, glue_dir))
    try:
        runner.run()
    finally:
        runner.close()
    [rec] = RecordStore(folder).records()
    assert rec["method"] == "random" and rec["base_failed"] == original["degenerate"]
    assert [f["method"] for f in runner.failures] == ["original"]


def test_bench_report_prints_each_warning_once(tmp_path):
    records = make_records(tasks=("mrpc",), seeds=(0, 1))
    folder = write_run(tmp_path / "run", records)
    (folder / "records.jsonl").write_text((folder / "records.jsonl").read_text() + "garbage\n")
    res = CliRunner().invoke(main, ["report", str(folder), "--no-plots"])
    assert res.exit_code == 0, res.output
    assert res.stderr.count("not valid JSON") == 1 and "warning: " in res.stderr


def test_an_against_name_without_rows_is_warned_about(tmp_path):
    folder = write_run(tmp_path / "run", make_records(tasks=("mrpc",), seeds=(0, 1)))
    with pytest.warns(ReportWarning, match=r"--against aubr: no record of a method called 'aubr'"):
        build_report([folder], against="original,aubr", plots=False, echo=False, n_boot=100, n_boot_examples=20)


SETTER = SelfBudgeted.name  # a budget setter with a fixed mask of 7 heads


def test_a_setter_record_read_with_schema_defaults_does_not_stop_the_run(tmp_path, glue_dir):
    """The store accepts what Record.from_dict reads (defaults for fields old schemas lacked); the runner must read
    the setter's and the original's records the same way, not index raw keys (a KeyError stopped the whole run)."""
    out = tmp_path / "run"
    run_smoke(out, glue_dir, methods_spec=f"random,{SETTER}", budget=f"matched:{SETTER}")
    lines = [json.loads(l) for l in _lines(out / "records.jsonl")]
    for rec in lines:  # drop what Record.from_dict can default: degenerate, and the budget's note
        rec.pop("degenerate", None)
        rec["budget"].pop("note", None)
    kept = [r for r in lines if r["method"] != "random"]
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    run_smoke(out, glue_dir, methods_spec=f"random,{SETTER}", budget=f"matched:{SETTER}")
    recs = {r["method"]: r for r in RecordStore(out).records()}
    assert recs["random"]["heads_pruned"] == recs[SETTER]["heads_pruned"] == 7
    assert recs["random"]["base_failed"] is False  # the original record without "degenerate" reads as False


def test_bench_run_prints_the_reports_warnings_as_plain_lines(smoke, glue_dir, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(smoke, folder)
    with open(folder / "records.jsonl", "a") as fh:  # a duplicated record: the summary and the report both warn
        fh.write(_lines(folder / "records.jsonl")[0])
    # a real process: pytest would capture Python's warnings before they reach stderr
    res = subprocess.run([sys.executable, "-m", "headprune_bench.benchmark.cli", *smoke_run_args(),
                          "--tasks", "wnli",
                          "--methods", "random", "--out", str(folder), "--data-dir", str(glue_dir), "--no-progress",
                          "--no-plots"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if "duplicate cell" in line]
    assert lines and all(line.startswith("warning: 1 duplicate cell(s)") for line in lines)
    assert "ReportWarning" not in res.stderr


def test_two_identical_runs_started_at_once_share_the_cells_instead_of_computing_them_twice(glue_dir, tmp_path):
    """Issue 42, item 5: two `bench run`s into one folder each computed every cell (24 records, 12 keys). A run
    claims a cell before computing it (an flock the OS releases if it dies) and waits, after its other cells, for
    the cells the other run holds; each cell is then computed once, and both runs end with every cell stored."""
    args = [sys.executable, "-m", "headprune_bench.benchmark.cli", *smoke_run_args(), "--tasks", "wnli",
            "--methods", "random,confidence", "--out", str(tmp_path), "--data-dir", str(glue_dir), "--no-progress",
            "--no-report"]
    runs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-1500:] for _, err in outputs]
    keys = [json.loads(line)["cell"] for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 6  # original, control, random and confidence x 2 conditions


def test_a_claimed_cell_is_left_to_its_holder_and_taken_once_released(tmp_path):
    from headprune_bench.benchmark.store.claims import Claims

    cell, other = "mrpc|seed=0|random|fraction:0.3|prune-only", "mrpc|seed=1|random|fraction:0.3|prune-only"
    mine, theirs = Claims(tmp_path), Claims(tmp_path)  # (flock: two open files conflict even in one process)
    assert mine.take(cell) and mine.take(cell)  # taking one's own claim again is a no-op
    assert not theirs.take(cell) and theirs.take(other)
    mine.release_all()
    assert theirs.take(cell, wait=True)
    assert mine.path("a") != mine.path("b") and mine.path("a").parent == tmp_path / ".claims"
