"""``bench export`` and ``bench speed`` on a run folder (issue 14; ``headprune_bench.benchmark.tools``): the folder
exported for a cell predicts what its record says, its ONNX graph agrees with torch, and ``bench speed``'s timings
reach the report. The exported folder itself (``methods.heads.export_pruned``) and the FLOPs it is timed
against: tests/methods/test_heads_export.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from tolerances import assert_within, bert_path_terms
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
)

# ------------------------------------------------------------------ bench export on a run folder


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, glue_dir):
    """A smoke run with recovery: WNLI seed 0, original, random, voita (whose own weights differ) and kwon (whose
    mask is scaled)."""
    from smoke_runs import run_smoke

    out = tmp_path_factory.mktemp("run")
    run_smoke(out, glue_dir, methods_spec="random,voita,kwon", recover=True)
    return out


def _records(folder: Path) -> dict[tuple[str, str], dict]:
    rows = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    return {(r["method"], r["condition"]): r for r in rows}


@pytest.mark.parametrize("method,condition", [("random", "prune+recover"), ("random", "prune-only"),
                                              ("voita", "own-fine-tuning"), ("original", "control"),
                                              ("kwon", "prune-only"), ("kwon", "prune+recover")])
def test_bench_export_writes_the_model_the_cell_evaluated(smoke_run, glue_dir, tmp_path, method, condition):
    from click.testing import CliRunner
    from smoke_runs import smoke_config

    from headprune_bench.benchmark import training
    from headprune_bench.benchmark.cli import main
    from headprune_bench.benchmark.run.runner import Runner
    from headprune_bench.benchmark.store.records import read_ids
    from headprune_bench.benchmark.tasks import get_task

    out = tmp_path / "export"
    result = CliRunner().invoke(main, ["export", str(smoke_run), "--task", "wnli", "--seed", "0", "--method", method,
                                       "--condition", condition, "--device", "cpu", "--data-dir", str(glue_dir),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = _records(smoke_run)[(method, condition)]
    info = json.loads((out / "export_info.json").read_text())
    assert info["cell"] == record["cell"] and info["predictions_differ"] == 0, info
    assert info["heads_per_layer"] == [sum(row) for row in record["mask"]]
    # the folder alone (no mask) predicts what the record says the cell predicted, example by example
    loaded = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    assert [layer.attention.self.num_attention_heads for layer in loaded.bert.encoder.layer] == info["heads_per_layer"]
    runner = Runner(smoke_config(smoke_run, glue_dir, methods_spec="random,voita", recover=True))
    try:
        data = runner.task_data(get_task("wnli"))
        _, predictions = training.evaluate(loaded, data.dev, data.spec, runner.tokenizer, torch.device("cpu"))
    finally:
        runner.close()
    assert predictions.tolist() == read_ids(record["predictions"])


def test_a_scaled_mask_is_exported_as_the_base_model_under_that_scaled_mask(smoke_run, glue_dir, tmp_path):
    """kwon's prune-only cell: the exported folder computes the base model under the record's scaled mask (the
    final hidden states, float32: the rounding tolerance of two BERT forward passes), which differs from the base
    model under the binary mask by more than that: the scales are applied, not dropped."""
    from click.testing import CliRunner
    from tolerances import bert_path_terms, float32_tolerance

    from headprune_bench.benchmark.cli import main
    from headprune_bench.methods.heads import apply_head_mask

    record = _records(smoke_run)[("kwon", "prune-only")]
    assert record["head_scales"] is not None and record["trace"]["tune"]["tuned_layers"], record["trace"]["tune"]
    out = tmp_path / "export"
    result = CliRunner().invoke(main, ["export", str(smoke_run), "--task", "wnli", "--seed", "0", "--method", "kwon",
                                       "--condition", "prune-only", "--device", "cpu", "--data-dir", str(glue_dir),
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    exported = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    base = AutoModelForSequenceClassification.from_pretrained(smoke_run / "base" / "wnli-seed0").eval()
    g = torch.Generator().manual_seed(0)
    inputs = {"input_ids": torch.randint(1000, 2000, (4, 24), generator=g),
              "attention_mask": torch.ones(4, 24, dtype=torch.long)}

    def last_hidden(model, mask=None):
        with torch.no_grad(), apply_head_mask(model, mask) if mask is not None else torch.no_grad():
            return model(**inputs, output_hidden_states=True).hidden_states[-1]

    scaled = torch.tensor(record["head_scales"])
    reference = last_hidden(base, scaled)
    tol = float32_tolerance(reference, bert_path_terms(base.config, 24))
    assert float((last_hidden(exported) - reference).abs().max()) <= tol
    assert float((last_hidden(base, torch.tensor(record["mask"], dtype=torch.float32)) - reference).abs().max()) > tol


def test_bench_export_names_what_the_folder_holds_and_a_missing_base_model(smoke_run, glue_dir, tmp_path):
    import shutil

    from click.testing import CliRunner

    from headprune_bench.benchmark.cli import main

    args = ["export", str(smoke_run), "--task", "wnli", "--seed", "0", "--device", "cpu", "--data-dir", str(glue_dir),
            "--out", str(tmp_path / "x")]
    missing = CliRunner().invoke(main, args + ["--method", "random", "--condition", "own-fine-tuning"])
    assert missing.exit_code != 0
    assert "no record of random on wnli seed 0 with condition own-fine-tuning" in missing.output
    assert "--condition prune+recover --budget fraction:0.3" in missing.output
    control = CliRunner().invoke(main, args + ["--method", "random", "--condition", "control"])
    assert "the fine-tuning control is --method original --condition control" in control.output
    typo = CliRunner().invoke(main, args + ["--method", "rnadom"])
    assert "wnli seed 0 has methods kwon, original, random, voita" in typo.output
    wrong_seed = CliRunner().invoke(main, [*args[:5], "1", *args[6:], "--method", "random"])
    assert "no record of random on wnli seed 1" in wrong_seed.output and "wnli has seeds 0" in wrong_seed.output
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    over = CliRunner().invoke(main, [*args[:-1], str(taken), "--method", "random", "--condition", "prune-only"])
    assert over.exit_code != 0 and "exists and is not empty" in over.output
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]
    copy_dir = tmp_path / "copy"
    shutil.copytree(smoke_run, copy_dir, ignore=shutil.ignore_patterns("base"))
    args[1] = str(copy_dir)
    no_base = CliRunner().invoke(main, args + ["--method", "random", "--condition", "prune-only"])
    assert no_base.exit_code != 0 and "the cached base model is missing" in no_base.output
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------ speed


def test_head_profiles_group_cells_per_count_or_per_mask():
    from synthetic_runs import make_records

    from headprune_bench.benchmark.store.records import Record
    from headprune_bench.benchmark.tools.speed import head_profiles

    rows = make_records(tasks=("mrpc",), seeds=(0,), methods={"original": ["none"], "random": ["fraction:0.25"]})
    base = Record.from_dict(next(r for r in rows if r["method"] == "random"))
    a = [[1, 1, 0], [0, 1, 1]]
    b = [[0, 1, 1], [1, 1, 0]]  # same count (2 pruned) and profile (2, 2)
    c = [[1, 0, 0], [1, 1, 1]]  # same count, profile (1, 3)
    recs = []
    for name, mask in (("x", a), ("y", b), ("z", c)):
        r = Record.from_dict({**base.to_dict(), "cell": f"mrpc|seed=0|{name}", "mask": mask, "heads_pruned": 2})
        recs.append(r)
    recs.append(Record.from_dict({**base.to_dict(), "cell": "mrpc|seed=0|orig", "mask": [[1] * 3] * 2,
                                  "heads_pruned": 0}))
    assert head_profiles(recs) == {(2, 2): ["mrpc|seed=0|x", "mrpc|seed=0|y", "mrpc|seed=0|z"]}
    assert head_profiles(recs, per_mask=True) == {(2, 2): ["mrpc|seed=0|x", "mrpc|seed=0|y"],
                                                  (1, 3): ["mrpc|seed=0|z"]}


def test_measure_times_each_model_and_shape_with_the_flops_speedup():
    from headprune_bench.benchmark.tools.speed import DENSE, MASKED, PRUNED, measure
    from headprune_bench.methods.heads import forward_flops

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=64, num_labels=2)
    model = BertForSequenceClassification(config).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    written = []  # (issue 42, item 12: an interrupted `bench speed` kept nothing) each shape's rows as measured
    rows = measure(model, [(2, 0, 4), (4, 4, 1)], [(1, 8), (3, 16)], torch.device("cpu"), min_run_time=0.01,
                   rounds=3, on_rows=lambda done: written.append([(r.batch, r.seq_len) for r in done]))
    assert written == [[(1, 8)] * 4, [(3, 16)] * 4]
    assert [(r.kind, sum(r.heads_per_layer), r.batch, r.seq_len) for r in rows] == [
        (kind, heads, b, t) for b, t in [(1, 8), (3, 16)]
        for kind, heads in ((DENSE, 12), (MASKED, 6), (PRUNED, 6), (PRUNED, 9))]
    for r in rows:
        dense = forward_flops(config, r.seq_len).total * r.batch
        assert r.median_s > 0 and r.blocks == 3 and r.iqr_s >= 0
        if r.kind == PRUNED:
            mask = torch.tensor([[1.0] * k + [0.0] * (4 - k) for k in r.heads_per_layer])
            assert r.flops == forward_flops(config, r.seq_len, mask).total * r.batch
            assert r.implied_speedup == pytest.approx(dense / r.flops) and r.implied_speedup > 1
        else:
            assert r.flops == dense and r.implied_speedup == 1.0
        if r.kind == DENSE:
            assert r.measured_speedup == 1.0
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())  # the model is not modified


def test_bench_speed_writes_timings_that_the_report_tables_and_plots(smoke_run, tmp_path):
    import shutil

    from click.testing import CliRunner

    from headprune_bench.benchmark.cli import main
    from headprune_bench.benchmark.report import build_report

    folder = tmp_path / "run"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("base"))
    result = CliRunner().invoke(main, ["speed", str(folder), "--batches", "1", "--lengths", "8,16", "--device", "cpu",
                                       "--min-run-time", "0.02"])
    assert result.exit_code == 0, result.output
    assert "2 shape(s): at least 0 s of timed calls (--min-run-time 0.02 s per model and shape)" in result.output
    assert "masked kept  50 heads, batch   1 T   8" in result.output  # heads kept, said so (50 of 72)
    lines = [json.loads(line) for line in (folder / "speed.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * 3  # two lengths x (dense, masked, one pruned profile: every cell pruned 22 heads)
    out = build_report([folder], echo=False)
    assert "## Speed (speed.jsonl" in (out / "report.md").read_text()
    cells = pd.read_csv(out / "speed_cells.csv")
    pruned = [r for r in _records(folder).values() if r["heads_pruned"] > 0]
    assert len(cells) == 2 * len(pruned) and set(cells["profile"]) == {"own", "same count"}
    assert (out / "plots" / "score_vs_speedup.png").exists()
    from smoke_runs import tiny_encoder
    from transformers import AutoConfig

    from headprune_bench.methods.heads import closed_form_parameter_count, forward_flops

    rows = pd.read_csv(out / "speed_rows.csv")  # per (task, method, condition) at batch 1, T 16
    config = AutoConfig.from_pretrained(tiny_encoder(), num_labels=2)  # the run's model
    random_row = rows[(rows["method"] == "random") & (rows["condition"] == "prune-only")].iloc[0]
    mask = torch.tensor(_records(folder)[("random", "prune-only")]["mask"])
    assert random_row["params (M)"] == pytest.approx(closed_form_parameter_count(config, mask) / 1e6, abs=0.005)
    assert random_row["GFLOPs/example (T 16)"] == pytest.approx(forward_flops(config, 16, mask).total / 1e9,
                                                                abs=0.0005)
    assert "measured speed-up (batch 1, T 16)" in rows.columns and set(rows["method"]) == {"random", "voita", "kwon"}


@pytest.mark.parametrize("bad, message", [
    (["--lengths", "0"], "--lengths '0'"),
    (["--lengths", "600"], "at most 512 tokens"),
    (["--batches", "a"], "--batches 'a'"),
    (["--heads-pruned", "5"], "no cell pruned [5] heads"),
    (["--rounds", "0"], "--rounds 0"),
], ids=["length-zero", "length-above-the-model", "batch-not-a-number", "heads-pruned-by-no-cell", "rounds-zero"])
def test_bench_speed_refuses_bad_options(smoke_run, tmp_path, bad, message):
    import shutil

    from click.testing import CliRunner

    from headprune_bench.benchmark.cli import main

    folder = tmp_path / "run"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("base"))
    refused = CliRunner().invoke(main, ["speed", str(folder), "--device", "cpu", *bad])
    assert refused.exit_code != 0 and message in refused.output, refused.output


def test_bench_export_onnx_agrees_with_torch_at_other_shapes(smoke_run, glue_dir, tmp_path):
    """The ONNX graph of an exported folder, at a batch and length other than the traced ones: onnxruntime's
    logits equal torch's within float32 rounding (both run float32 kernels of their own; the logits' scale is
    taken from the classifier head, tests/tolerances.py)."""
    ort = pytest.importorskip("onnxruntime")
    from click.testing import CliRunner
    from tolerances import float32_tolerance, logit_scale

    from headprune_bench.benchmark.cli import main

    out = tmp_path / "export"
    result = CliRunner().invoke(main, ["export", str(smoke_run), "--task", "wnli", "--seed", "0", "--method", "random",
                                       "--condition", "prune-only", "--device", "cpu", "--data-dir", str(glue_dir),
                                       "--out", str(out), "--onnx"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "export_info.json").read_text())
    assert info["onnx"]["file"] == "model.onnx" and "ONNX:" in result.output
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    enc = tokenizer(["A short one.", "The trophy does not fit into the suitcase because it is too large."],
                    ["It is.", "The suitcase is too small."], padding=True, return_tensors="pt")
    assert enc["input_ids"].shape[0] == 2 and enc["input_ids"].shape[1] != info["onnx"]["batch"][1]
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    onnx_logits = torch.from_numpy(session.run(["logits"], {k: v.numpy() for k, v in enc.items()})[0])
    with torch.no_grad():
        out_torch = model(**enc, output_hidden_states=True)
    terms = bert_path_terms(model.config, enc["input_ids"].shape[1])
    scale = logit_scale(model, float(out_torch.hidden_states[-1].abs().max()))
    assert_within(onnx_logits, out_torch.logits, float32_tolerance(out_torch.logits, terms, scale=scale), "onnx")
    assert info["onnx"]["max_abs_diff"] <= float32_tolerance(out_torch.logits, bert_path_terms(
        model.config, info["onnx"]["batch"][1]), scale=scale)
