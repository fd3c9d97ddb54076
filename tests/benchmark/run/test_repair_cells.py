"""``bench run --repair`` (issue 62): a repair cell ``prune+<repair>`` repairs the selector's recorded mask without
running the selector again, resumes from a stored prune-only record, is skipped with a line for a method that
repairs its own mask, exports as evaluated, and bad ``--repair`` lists are refused before any work."""
from __future__ import annotations

import pytest
from fakes import CountsPrunes  # importing fakes registers every test-* method these tests name
from smoke_runs import run_smoke, smoke_config

from headprune_bench.benchmark.config.presets import ConfigError
from headprune_bench.benchmark.run.runner import Runner
from headprune_bench.benchmark.store.jsonl import RecordStore
from headprune_bench.benchmark.store.records import Record, read_ids
from headprune_bench.benchmark.tools.export import export_cell

REPAIRS = "none,bias,scales"


def _records(folder, method):
    return {r["condition"]: r for r in RecordStore(folder).records() if r["method"] == method}


def test_each_repair_cell_reuses_the_prune_only_mask_and_resumes_from_its_record(tmp_path, glue_dir):
    CountsPrunes.calls = 0
    run_smoke(tmp_path, glue_dir, methods_spec="test-counts-prunes", repair=REPAIRS)
    assert CountsPrunes.calls == 1  # prune-only pruned; both repair cells (and own weights) took its step
    recs = _records(tmp_path, "test-counts-prunes")
    assert {"prune-only", "prune+bias", "prune+scales"} <= set(recs)
    for condition, weights, changes in (("prune+bias", "base+bias", ["output bias"]),
                                        ("prune+scales", "base+scales", ["head scales"])):
        r = recs[condition]
        assert r["mask"] == recs["prune-only"]["mask"] and r["weights"] == weights
        assert r["trace"]["repair"]["name"] == Record.from_dict(r).repair == condition.split("+")[1]
        assert r["trace"]["repair"]["changes"] == changes and r["trace"]["repair"]["failed_layers"] == {}
        assert r["trace"]["repair"]["calibration"]["examples"] > 0
    assert recs["prune+scales"]["head_scales"] is not None and "head_scales" not in recs["prune+bias"]
    # stopped after the prune-only cell: the repairs take the stored mask, and compute the same models again
    store = tmp_path / "records.jsonl"
    lines = store.read_text().splitlines()
    store.write_text("".join(line + "\n" for line in lines if '"prune+bias"' not in line
                             and '"prune+scales"' not in line))
    CountsPrunes.calls = 0
    run_smoke(tmp_path, glue_dir, methods_spec="test-counts-prunes", repair=REPAIRS)
    assert CountsPrunes.calls == 0
    again = _records(tmp_path, "test-counts-prunes")
    for condition in ("prune+bias", "prune+scales"):
        assert again[condition]["mask"] == recs[condition]["mask"]
        assert read_ids(again[condition]["predictions"]) == read_ids(recs[condition]["predictions"])
        assert again[condition]["trace"]["repair"]["output_hash"] == recs[condition]["trace"]["repair"]["output_hash"]


def test_kwon_repairs_its_own_mask_and_is_skipped_with_a_line(tmp_path, glue_dir):
    runner = Runner(smoke_config(tmp_path, glue_dir, methods_spec="kwon,random", repair="bias"), dry_run=True)
    try:
        conditions = {(c.method, c.condition) for c in runner.planned_cells()}
        assert ("random", "prune+bias") in conditions and ("kwon", "prune-only") in conditions
        assert ("kwon", "prune+bias") not in conditions
        assert runner.repair_skips() == ["--repair: kwon is skipped: it applies its own repair (scales) to its mask; "
                                         "its selection alone is kwon-rearrange"]
    finally:
        runner.close()


@pytest.mark.parametrize("repair, message", [
    ("bais", r"--repair: unknown repair 'bais' \(did you mean 'bias'\?\); known repairs: bias"),
    ("bias,,scales", "expected a comma-separated list of repairs"),
    ("finetune", "--repair finetune is the prune\\+recover condition, which --no-recover turns off"),
])
def test_a_bad_repair_list_is_refused_before_any_work(tmp_path, glue_dir, repair, message):
    with pytest.raises(ConfigError, match=message):
        smoke_config(tmp_path / "run", glue_dir, repair=repair)
    assert not (tmp_path / "run").exists()


def test_none_and_finetune_name_the_existing_conditions(tmp_path, glue_dir):
    cfg = smoke_config(tmp_path, glue_dir, repair="none,finetune,bias,bias", recover=True)
    assert cfg.repairs == ("bias",) and cfg.recover


def test_an_exported_repair_cell_loads_and_predicts_as_evaluated(tmp_path, glue_dir):
    """bench export of a repair cell runs the repair again from the stored mask; the folder alone, loaded as a user
    loads it, predicts every dev example as the record says the cell did."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from headprune_bench.benchmark import training
    from headprune_bench.benchmark.tasks import get_task

    run = tmp_path / "run"
    run_smoke(run, glue_dir, repair="bias,scales")
    records = _records(run, "random")
    runner = Runner(smoke_config(run, glue_dir, repair="bias,scales"))
    try:
        data = runner.task_data(get_task("wnli"))
        for condition in ("prune+bias", "prune+scales"):
            info = export_cell(run, task="wnli", seed=0, method="random", condition=condition,
                               out=tmp_path / condition, data_dir=str(glue_dir), device="cpu")
            assert info.predictions_differ == 0 and info.heads_pruned > 0
            loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / condition,
                                                                        trust_remote_code=True).eval()
            _, predictions = training.evaluate(loaded, data.dev, data.spec, runner.tokenizer, torch.device("cpu"))
            assert predictions.tolist() == read_ids(records[condition]["predictions"])
    finally:
        runner.close()
