"""Fine-tuning and evaluation: seeded determinism, fixed masks during training, early stopping, model loading."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from tolerances import bert_path_terms, logit_scale, rounding_tolerance
from transformers import AlbertConfig, BertConfig, BertForSequenceClassification, DataCollatorWithPadding

from headprune_bench.benchmark import models, tasks, training
from headprune_bench.benchmark.config.presets import ConfigError, parse_budget
from headprune_bench.methods.heads import UnsupportedArchitectureError, get_layout

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tokenizer():
    return models.load_tokenizer("minilm-l6")


@pytest.fixture(scope="module")
def wnli(glue_dir, tokenizer):
    raw = tasks.load_task("wnli", glue_dir)
    spec = tasks.get_task("wnli")
    return spec, training.encode(raw["train"].select(range(40)), spec, tokenizer, 64)


def _tiny(seed=0):
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=37, num_labels=2)
    return BertForSequenceClassification(cfg)


def test_same_seed_same_weights_and_predictions(wnli, tokenizer):
    spec, data = wnli
    cfg = training.TrainConfig(lr=1e-3, batch_size=8, epochs=2)
    states, preds = [], []
    for _ in range(2):
        model, _ = training.fine_tune(_tiny(), data, tokenizer, CPU, cfg, seed=3, progress=False)
        states.append(model.state_dict())
        preds.append(training.predict(model, data, tokenizer, CPU))
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert np.array_equal(preds[0], preds[1])
    other, _ = training.fine_tune(_tiny(), data, tokenizer, CPU, cfg, seed=4, progress=False)
    assert not all(torch.equal(states[0][k], other.state_dict()[k]) for k in states[0])


def test_fixed_mask_during_fine_tuning(wnli, tokenizer):
    """A pruned head's output is multiplied by 0, so its Q/K/V weights get no gradient: with weight decay 0 they
    stay exactly as they were, while kept heads' weights move."""
    spec, data = wnli
    model = _tiny()
    layout = get_layout(model)
    before = layout.value(0).weight.detach().clone()
    mask = torch.ones(2, 4)
    mask[0, 1] = 0
    cfg = training.TrainConfig(lr=1e-3, batch_size=8, epochs=1, weight_decay=0.0)
    training.fine_tune(model, data, tokenizer, CPU, cfg, seed=0, mask=mask, progress=False)
    d = layout.head_size
    after = layout.value(0).weight.detach()
    assert torch.equal(after[d:2 * d], before[d:2 * d])  # head 1 of layer 0: untouched
    assert not torch.equal(after[:d], before[:d])  # head 0 trained
    # the hooks are gone after training
    assert not layout.output_dense(0)._forward_pre_hooks


def test_early_stopping_restores_the_best_state(wnli, tokenizer):
    spec, data = wnli
    scores = iter([0.5, 0.7, 0.6, 0.4, 0.9])
    snapshots = []

    def eval_fn(model):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return next(scores)

    cfg = training.TrainConfig(lr=1e-3, batch_size=8, epochs=5, early_stopping=True, patience=2)
    model, info = training.fine_tune(_tiny(), data, tokenizer, CPU, cfg, seed=0, eval_fn=eval_fn, progress=False)
    assert info["stopped_early"] and [h["score"] for h in info["history"]] == [0.5, 0.7, 0.6, 0.4]
    assert info["best_score"] == 0.7
    assert all(torch.equal(model.state_dict()[k], snapshots[1][k]) for k in snapshots[1])
    with pytest.raises(ValueError, match="early_stopping needs an eval_fn"):
        training.fine_tune(_tiny(), data, tokenizer, CPU, cfg, seed=0, progress=False)


def test_should_stop_ends_the_fine_tune_after_the_step_it_returns_true(wnli, tokenizer):
    """Asked after every step (5 per epoch here); True after the third ends training there, before a fourth."""
    spec, data = wnli
    asked = []

    def should_stop():
        asked.append(len(asked) + 1)
        return len(asked) == 3

    cfg = training.TrainConfig(lr=1e-3, batch_size=8, epochs=2)
    with pytest.raises(training.TrainingStopped, match="after step 3 of 10") as stopped:
        training.fine_tune(_tiny(), data, tokenizer, CPU, cfg, seed=0, progress=False, should_stop=should_stop)
    assert (stopped.value.steps, stopped.value.total_steps) == (3, 10) and asked == [1, 2, 3]
    model, info = training.fine_tune(_tiny(), data, tokenizer, CPU, cfg, seed=0, progress=False,
                                     should_stop=lambda: False)
    assert info["steps"] == 10


def test_evaluate_returns_all_metrics_and_predictions_in_order(glue_dir, tokenizer):
    """Batching by length must not reorder predictions: batched (padded) and one-at-a-time predictions agree.

    The two are different computations of the same logits, so their argmaxes agree on every machine only where
    no example's two logits lie within rounding of each other. For a fresh MiniLM head the smallest gap over
    these 30 examples is 2.0e-3 with the seed below (6.4e-5 with seed 0), below the float32 rounding tolerance
    of the logits (tests/tolerances.py with ``logit_scale``: 2.3e-3), so float32 predictions could differ
    between kernels. The model therefore runs in float64 (the check is about order, not precision) with a
    seeded head, and the smallest gap is asserted to exceed twice the float64 tolerance (4.3e-12)."""
    spec = tasks.get_task("mrpc")
    raw = tasks.load_task(spec, glue_dir)
    dev = training.encode(raw["validation"].select(range(30)), spec, tokenizer, 128)
    torch.manual_seed(1)  # the classification head is freshly initialised: the same head on every run
    model = models.load_classifier("minilm-l6", 2).double()
    metrics, preds = training.evaluate(model, dev, spec, tokenizer, CPU)
    assert set(metrics) == {"accuracy", "f1"} and preds.shape == (30,)
    # batching by length must not reorder predictions: compare with one-at-a-time prediction
    single = [int(training.predict(model, dev.select([i]), tokenizer, CPU)[0]) for i in range(30)]
    assert preds.tolist() == single
    batch = DataCollatorWithPadding(tokenizer, return_tensors="pt")([dev[i] for i in range(30)])
    with torch.no_grad():
        out = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")},
                    output_hidden_states=True)
    scale = logit_scale(model, float(out.hidden_states[-1].abs().max()))
    tol = rounding_tolerance(None, bert_path_terms(model.config, batch["input_ids"].shape[1]), torch.float64,
                             scale=scale)
    assert float((out.logits[:, 0] - out.logits[:, 1]).abs().min()) > 2 * tol  # no prediction within rounding of a tie
    assert metrics == tasks.compute_metrics(spec, preds, np.asarray(raw["validation"]["label"][:30]))


def test_model_alias_and_unsupported_architecture(tmp_path):
    path = models.resolve_model("minilm-l6")
    assert (models.Path(path) / "config.json").exists()
    assert models.check_architecture("minilm-l6").model_type == "bert"
    AlbertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=40).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match=r"model_type='albert'; supported: bert, roberta"):
        models.check_architecture(str(tmp_path))


def test_a_half_precision_checkpoint_loads_in_fp32(tmp_path):
    # transformers 5 loads in the saved dtype by default; fine-tuning an fp16 checkpoint in fp16 would be silent
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    BertForSequenceClassification(cfg).half().save_pretrained(tmp_path)
    model = models.load_classifier(str(tmp_path), num_labels=2)
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_device_and_budget_parsing():
    assert models.resolve_device("cpu").type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert models.resolve_device("auto").type == expected
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            models.resolve_device("cuda")
    assert parse_budget("fraction:0.3").target(72) == 22
    assert parse_budget("heads:5").target(72) == 5
    assert parse_budget("matched:auber").target(72) is None
    with pytest.raises(ConfigError, match="the model has 72 heads"):
        parse_budget("heads:80").target(72)
    with pytest.raises(ConfigError, match="expected heads:K, fraction:F or matched:METHOD"):
        parse_budget("half")


def test_unreachable_hub_model_names_the_option(monkeypatch):
    """Offline, a hub name that is not cached fails fast with an error that names --model and the way out."""
    import huggingface_hub.constants

    from headprune_bench.benchmark import models

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match=r"--model nobody/no-such-model: cannot load its configuration(.|\n)*minilm-l6"):
        models.check_architecture("nobody/no-such-model")


# --------------------------------------------------------------------------- --precision bf16


def test_bf16_autocast_is_on_only_when_asked_and_unknown_values_are_refused():
    model = _tiny().eval()
    ids = torch.randint(1000, 2000, (2, 7))
    dense = model.bert.encoder.layer[0].attention.self.query
    with training.autocast(CPU, "bf16"):
        assert dense(torch.randn(1, 32)).dtype == torch.bfloat16  # matrix products run in bfloat16
        logits_bf16 = model(input_ids=ids).logits
    with training.autocast(CPU, "fp32"):
        assert dense(torch.randn(1, 32)).dtype == torch.float32
        logits_fp32 = model(input_ids=ids).logits
    # bf16 rounds the matmul inputs, so the logits change. No closeness bound is asserted: with bfloat16's unit
    # roundoff 2**-8, tests/tolerances.py's bound (2 * 8 * u * sqrt(N) * scale, N = 697 here) is 1.7, far above
    # these O(0.02) logits, so it could not fail; a number picked on this CPU would not hold on others.
    assert not torch.equal(logits_bf16.float(), logits_fp32)
    with pytest.raises(ValueError, match="--precision 'fp16': expected one of fp32, bf16"):
        training.autocast(CPU, "fp16")
    with pytest.raises(ConfigError, match="--precision 'tf32'"):
        from headprune_bench.benchmark.run.runner import make_run_config

        make_run_config(out="x", preset="smoke", methods_spec="random", tasks_spec="wnli", seeds=None, model=None,
                        budget=None, device="cpu", data_dir=None, recover=False, precision="tf32")


def test_bf16_fine_tuning_keeps_float32_weights_and_differs_from_fp32(wnli, tokenizer):
    spec, data = wnli
    cfg = training.TrainConfig(lr=1e-3, batch_size=8, epochs=1)
    fp32, _ = training.fine_tune(_tiny(), data, tokenizer, CPU, cfg, seed=3, progress=False)
    bf16, log = training.fine_tune(_tiny(), data, tokenizer, CPU, cfg, seed=3, progress=False, precision="bf16")
    assert all(p.dtype == torch.float32 for p in bf16.parameters())  # autocast, not a bf16 model
    assert log["steps"] == 5 and all(torch.isfinite(p).all() for p in bf16.parameters())
    assert not all(torch.equal(a, b) for a, b in zip(fp32.state_dict().values(), bf16.state_dict().values()))
    preds = training.predict(bf16, data, tokenizer, CPU, precision="bf16")
    assert preds.shape == (40,) and set(preds.tolist()) <= {0, 1}


def test_precision_is_part_of_the_experiment_and_fp32_folders_keep_their_hash(glue_dir, tmp_path):
    import json

    from smoke_runs import smoke_config

    from headprune_bench.benchmark.run.runner import Runner

    Runner(smoke_config(tmp_path / "fp32", glue_dir)).close()
    stored = json.loads((tmp_path / "fp32" / "run.json").read_text())
    assert stored["experiment"]["extra"] == {}  # fp32, the default, adds nothing: older folders stay valid
    Runner(smoke_config(tmp_path / "bf16", glue_dir, precision="bf16")).close()
    bf16 = json.loads((tmp_path / "bf16" / "run.json").read_text())
    assert bf16["experiment"]["extra"] == {"precision": "bf16"} and bf16["config_hash"] != stored["config_hash"]
    with pytest.raises(ConfigError, match=r"extra.precision: '<absent>' -> 'bf16'"):
        Runner(smoke_config(tmp_path / "fp32", glue_dir, precision="bf16"))
    with pytest.raises(ConfigError, match=r"extra.precision: 'bf16' -> '<absent>'"):
        Runner(smoke_config(tmp_path / "bf16", glue_dir))


def test_a_folder_whose_weights_disagree_with_its_config_is_refused_before_the_run_folder(tmp_path, glue_dir):
    """Issue 42, item 7: an exported (physically pruned) folder whose config.json lost `pruned_heads`, given as
    --model, used to create the run folder and then fail in transformers. Its unpruned twin passes the check."""
    import json

    from click.testing import CliRunner

    from headprune_bench.benchmark.cli import main
    from headprune_bench.methods.conformance import tiny_model
    from headprune_bench.methods.heads import remove_heads, save_pruned

    tiny_model(0).save_pretrained(tmp_path / "whole")
    models.check_architecture(str(tmp_path / "whole"))
    mask = torch.ones(3, 4)
    mask[1, 2] = 0
    save_pruned(remove_heads(tiny_model(0), mask), tmp_path / "exported")
    config = json.loads((tmp_path / "exported" / "config.json").read_text())
    del config["pruned_heads"]
    (tmp_path / "exported" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"layer\.1\.attention\.output\.dense\.weight with shape \[32, 24\], "
                                         r"but config\.json gives \[32, 32\].*lost `pruned_heads`"):
        models.check_architecture(str(tmp_path / "exported"))
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["run", "--preset", "smoke", "--methods", "random", "--tasks", "wnli", "--model",
                                    str(tmp_path / "exported"), "--data-dir", str(glue_dir), "--out", str(out)])
    assert res.exit_code == 1 and "config.json lost `pruned_heads`" in res.output and not out.exists()
