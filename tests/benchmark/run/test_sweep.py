"""Sweeps: ``--budget`` lists parsed and refused before anything is created, every level planned as cells of one
run, and methods that rank once scoring a (task, seed) once, their masks equal to separate runs at each level."""
from __future__ import annotations

import shutil

import pytest
import torch
from fakes import OwnBudget  # noqa: F401 - registers test-own-budget
from smoke_runs import run_smoke, smoke_config, stable

from headprune_bench.benchmark.config.presets import ConfigError, parse_budgets
from headprune_bench.benchmark.run.runner import Runner
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.benchmark.store.records import SCORE_PASS
from headprune_bench.methods import HeadPruner, PruningResult
from headprune_bench.methods.conformance import check_ranks_once

LEVELS = "fraction:0.1,0.5,0.9"
METHODS = "random,michel"


@pytest.mark.parametrize("text, labels", [
    ("fraction:0.1,0.5,0.9", ["fraction:0.1", "fraction:0.5", "fraction:0.9"]),
    ("heads:8, 16", ["heads:8", "heads:16"]),
    ("fraction:0.3,0.5,matched:auber", ["fraction:0.3", "fraction:0.5", "matched:auber"]),
    ("heads:2,fraction:0.5,0.7", ["heads:2", "fraction:0.5", "fraction:0.7"]),
    ("fraction:0.3", ["fraction:0.3"]),
    ("sweep", ["fraction:0.1", "fraction:0.3"]),
])
def test_budget_lists_parse_into_levels(text, labels):
    assert [b.label for b in parse_budgets(text, sweep="fraction:0.1,0.3")] == labels


@pytest.mark.parametrize("text, message", [
    ("fraction:0.1,,0.5", "item 2 is empty"),
    ("fraction:0.1,0.5,", "item 3 is empty"),
    ("fraction:0.5,0.50", "level fraction:0.5 is given twice"),
    ("fraction:0.1,1.5", "F must be in [0, 1]"),
    ("fraction:0.1,-0.2", "F must be in [0, 1]"),
    ("heads:3,٣", "K must be a non-negative integer"),
    ("heads:²", "K must be a non-negative integer"),
    ("fraction:0.١", "F must be a number"),
    ("0.1,0.5", "item '0.1' has no kind"),
    ("matched:auber,0.5", "item '0.5' has no kind"),
    ("matched:auber,matched:dsp", "at most one matched: level"),
    ("sweep", "this preset has no sweep levels"),
])
def test_bad_budget_lists_are_refused_naming_the_item(text, message):
    with pytest.raises(ConfigError, match="--budget") as info:
        parse_budgets(text)
    assert message in str(info.value)


@pytest.mark.parametrize("budget, message", [
    ("fraction:0.1,heads:7", "fraction:0.1 and heads:7 both prune 7 of the model's 72 heads"),
    ("fraction:0.5,0.505", "fraction:0.5 and fraction:0.505 both prune 36"),
    ("heads:8,80", "K must be in 0..72"),
])
def test_levels_the_model_cannot_tell_apart_are_refused_before_the_folder_exists(tmp_path, glue_dir, budget,
                                                                                  message):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="--budget") as info:
        Runner(smoke_config(out, glue_dir, budget=budget))
    assert message in str(info.value)
    assert not out.exists()


def test_the_smoke_preset_sweep_plans_every_level_once(tmp_path, glue_dir):
    runner = Runner(smoke_config(tmp_path / "run", glue_dir, methods_spec="random,test-own-budget", budget="sweep",
                                 recover=True))
    try:
        cells = runner.planned_cells()
    finally:
        runner.close()
    budgets = [(c.method, c.budget, c.condition) for c in cells]
    assert budgets.count(("original", "none", "prune-only")) == 1
    assert [b for m, b, c in budgets if m == "random" and c == "prune-only"] == ["fraction:0.1", "fraction:0.5",
                                                                                   "fraction:0.9"]
    assert [b for m, b, c in budgets if m == "test-own-budget"] == ["own", "own"]  # a point: one cell per condition
    assert len(set(budgets)) == len(budgets)


def _separate(tmp_path, glue_dir, swept, budget):
    """A one-level run of the sweep's methods into a new folder holding the sweep's base model (no new fine-tune)."""
    out = tmp_path / f"alone-{budget}"
    shutil.copytree(swept / "base", out / "base")
    run_smoke(out, glue_dir, methods_spec=METHODS, budget=budget)
    return stable(RecordStore(out).records())


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, glue_dir):
    out = tmp_path_factory.mktemp("sweep") / "run"
    run_smoke(out, glue_dir, methods_spec=METHODS, budget=LEVELS)
    return out


def test_a_sweep_scores_once_and_its_masks_equal_separate_runs(sweep, tmp_path, glue_dir):
    records = stable(RecordStore(sweep).records())
    assert len(records) == 1 + 2 * 3
    first = {m: f"wnli|seed=0|{m}|fraction:0.1|prune-only" for m in ("random", "michel")}
    for key, record in records.items():
        if record["method"] == "original":
            continue
        scored = record["trace"].get(SCORE_PASS)
        if record["budget"]["spec"] == "fraction:0.1":
            assert scored is None, key
        else:  # derived from the 0.1 cell's scores, whose cost is counted there only
            assert scored["cell"].startswith(first[record["method"]]), key
    michel = [r for r in RecordStore(sweep).records() if r["method"] == "michel"]
    passes = [r for r in michel if SCORE_PASS not in r["trace"]]
    assert len(passes) == 1 and passes[0]["cost"]["backward_examples"] > 0
    assert all(r["cost"]["backward_examples"] == 0 for r in michel if SCORE_PASS in r["trace"])
    for budget in ("fraction:0.5", "fraction:0.9"):
        alone = _separate(tmp_path, glue_dir, sweep, budget)
        for key, record in alone.items():
            derived = records[key]
            assert derived["mask"] == record["mask"] and derived["scores"] == record["scores"], key
            assert derived["predictions"] == record["predictions"], key
            trace = {k: v for k, v in derived["trace"].items() if k != SCORE_PASS}
            assert trace == record["trace"], key


def test_a_resumed_sweep_takes_the_scores_of_a_stored_level(sweep, tmp_path, glue_dir):
    out = tmp_path / "resumed"
    shutil.copytree(sweep / "base", out / "base")
    run_smoke(out, glue_dir, methods_spec="michel", budget="fraction:0.5")
    run_smoke(out, glue_dir, methods_spec="michel", budget="fraction:0.5,0.9")
    records = {r["budget"]["spec"]: r for r in RecordStore(out).records() if r["method"] == "michel"}
    assert records["fraction:0.9"]["trace"][SCORE_PASS]["cell"] == records["fraction:0.5"]["cell"]
    assert records["fraction:0.9"]["mask"] == stable(RecordStore(sweep).records())[
        next(k for k in stable(RecordStore(sweep).records()) if "michel|fraction:0.9" in k)]["mask"]


class _Unfaithful(HeadPruner):
    """Claims to rank once, but its scores depend on the target."""

    name = "test-unfaithful-ranks-once"
    summary = "test only"

    def ranks_once(self) -> bool:
        return True

    def prune(self, model, context) -> PruningResult:
        scores = torch.arange(context.total_heads, dtype=torch.float32).reshape(context.num_layers, -1)
        if context.target_heads % 2:
            scores = scores.flip(-1)
        mask = torch.ones_like(scores)
        mask.view(-1)[scores.flatten().argsort()[: context.target_heads]] = 0
        return PruningResult(mask=mask, scores=scores)


def test_check_ranks_once_catches_scores_that_depend_on_the_target():
    from headprune_bench.methods.conformance import synthetic_context, tiny_model

    model = tiny_model()
    result = _Unfaithful().prune(model, synthetic_context(model, target_heads=2))
    with pytest.raises(AssertionError, match=r"mask_at\(K=1\) differs from prune\(\) at K=1"):
        check_ranks_once(_Unfaithful, result)
