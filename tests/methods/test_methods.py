"""The HeadPruner interface, the registry, and the random / confidence / michel methods."""
from __future__ import annotations

import re

import fakes  # noqa: F401  (registers the test-* methods: test-last-heads, test-vandal, test-dice)
import pytest
import torch
import torch.nn.functional as F
from tolerances import assert_within, bert_gate_gradient_terms, rounding_tolerance

from headprune_bench import methods
from headprune_bench.methods import HeadPruner, OptionError, lowest_k_mask, register
from headprune_bench.methods.confidence import head_confidence
from headprune_bench.methods.conformance import check_pruner, collate, synthetic_context, synthetic_split, tiny_model
from headprune_bench.methods.heads import apply_head_mask
from headprune_bench.methods.michel import head_importance, normalize_by_layer
from headprune_bench.methods.registry import in_methods_all, shipped_methods

# --------------------------------------------------------------------------- interface and registry


def test_michel_variants_conform():
    check_pruner("michel", target_heads=7, mode="iterative", estimator="token", normalize_by_layer=False)


def test_confidence_variants_conform():
    for exclude in ("none", "cls_sep"):
        check_pruner("confidence", target_heads=4, exclude_keys=exclude)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("name", sorted(shipped_methods()))
def test_every_registered_method_conforms(name):
    """Every registered method (built-in, ablation or entry point) passes the conformance check under its class's
    ``conformance_options``, without a test of its own (after scikit-learn's common estimator checks)."""
    cls = methods.get_method_class(name)
    check_pruner(name, **cls.conformance_options)


BUILTIN_ORDER = ["random", "confidence", "michel", "voita", "dsp", "redundancy", "kwon", "auber"]


def test_builtins_declare_report_order_and_colour_and_ablations_do_not():
    registry = methods.available_methods()
    builtins = [registry[name] for name in BUILTIN_ORDER]
    assert [cls.report_order for cls in builtins] == sorted(cls.report_order for cls in builtins)
    assert len({cls.report_order for cls in builtins}) == len({cls.report_color for cls in builtins}) == 8
    assert all(re.fullmatch(r"#[0-9A-F]{6}", cls.report_color) for cls in builtins)
    ablations = [cls for cls in registry.values() if cls.ablation_of]
    assert {cls.name for cls in ablations} >= {"auber-query", "auber-key", "auber-l2", "auber-reverse", "kwon-search",
                                              "kwon-rearrange"}
    assert all(cls.report_order is None and cls.report_color is None for cls in ablations)


def test_methods_all_selects_every_method_and_auber_null_but_not_the_other_ablations():
    """`--methods all` (headprune_bench.benchmark.config.run) = the shipped methods with code of their own plus
    auber-null, whose count the headline prints beside AUBER's; AUBER's Table-3 ablations are named explicitly. A
    method registered on the fly follows the same rule, its in_methods_all overriding its ablation_of."""
    from headprune_bench.benchmark.config.run import _method_names

    selected = set(_method_names("all"))
    assert set(BUILTIN_ORDER) | {"auber-null"} <= selected
    assert not selected & {"auber-query", "auber-key", "auber-l2", "auber-reverse", "kwon-search", "kwon-rearrange"}
    assert {name for name, cls in shipped_methods().items() if in_methods_all(cls)} == set(BUILTIN_ORDER) | {
        "auber-null"}

    class Dropped(HeadPruner):
        ablation_of = "random"

    class Kept(Dropped):
        in_methods_all = True

    class Excluded(HeadPruner):
        in_methods_all = False

    assert (in_methods_all(Dropped), in_methods_all(Kept), in_methods_all(Excluded)) == (False, True, False)


@pytest.mark.parametrize("name, options, error, message", [
    ("michell", {}, methods.UnknownMethodError, r"did you mean 'michel'"),
    ("michel", {"mdoe": "iterative"}, OptionError, r"unknown option.*'mdoe'.*known options: .*mode"),
    ("michel", {"normalize_by_layer": "yes"}, OptionError, r"'normalize_by_layer'.*cannot parse 'yes' as bool"),
    ("michel", {"normalize_by_layer": 3}, OptionError, r"'normalize_by_layer'.*expects bool"),
], ids=["unknown-method", "unknown-option", "unparsable-bool", "int-for-bool"])
def test_unknown_methods_and_mistyped_options_are_refused(name, options, error, message):
    with pytest.raises(error, match=message):
        methods.create(name, **options)


def test_cli_strings_are_parsed_as_json_for_non_string_options():
    assert methods.create("random", min_heads_per_layer="1").options["min_heads_per_layer"] == 1


def test_register_rejects_duplicates_and_non_pruners():
    class Fake(HeadPruner):
        name = "random"
        summary = "clash"

        def prune(self, model, context):  # pragma: no cover
            raise NotImplementedError

    methods.available_methods()
    with pytest.raises(ValueError, match="already registered"):
        register(Fake)
    with pytest.raises(TypeError):
        register(int)


def test_a_new_method_in_one_class_passes_conformance():
    """What README's 'Adding a method' shows: a class, @register (``fakes.LastHeads``), and check_pruner in a test."""
    check_pruner("test-last-heads", target_heads=6)


def test_conformance_catches_a_method_that_edits_the_model():
    with pytest.raises(AssertionError, match="changed the base model"):
        check_pruner("test-vandal", target_heads=2)  # fakes.Vandal


def test_conformance_catches_nondeterminism():
    with pytest.raises(AssertionError, match="not deterministic"):
        check_pruner("test-dice", target_heads=4)  # fakes.Dice


# --------------------------------------------------------------------------- lowest_k_mask


def test_lowest_k_mask_global_order_ties_and_floor():
    scores = torch.tensor([[0.1, 0.5, 0.1], [0.3, 0.0, 0.9]])
    m = lowest_k_mask(scores, 3)
    assert m.tolist() == [[0, 1, 0], [1, 0, 1]]  # 0.0, then the tied 0.1s in flat order
    m = lowest_k_mask(scores, 2)
    assert m.tolist() == [[0, 1, 1], [1, 0, 1]]  # tie broken by the flat index
    m = lowest_k_mask(scores, 4, min_heads_per_layer=1)
    assert m.sum(dim=1).min() >= 1 and int((m == 0).sum()) == 4
    with pytest.raises(ValueError, match="at least 1 head"):
        lowest_k_mask(scores, 5, min_heads_per_layer=1)
    with pytest.raises(ValueError, match="0 <= k <= 6"):
        lowest_k_mask(scores, 7)


# --------------------------------------------------------------------------- random


def _context(target=5, seed=0, **kw):
    model = tiny_model()
    return model, synthetic_context(model, seed=seed, target_heads=target, **kw)


def test_random_samples_without_replacement_and_depends_on_seed():
    masks = []
    for seed in range(6):
        model, ctx = _context(target=5, seed=seed)
        res = methods.create("random").prune(model, ctx)
        assert res.heads_pruned == 5
        masks.append(res.mask)
    assert len({tuple(m.flatten().tolist()) for m in masks}) > 1


def test_random_is_uniform_over_heads():
    """Each of the 12 heads is pruned with probability K/12; 600 seeds, K=3 -> expected 150 per head."""
    counts = torch.zeros(3, 4)
    model = tiny_model()
    for seed in range(600):
        ctx = synthetic_context(model, seed=seed, target_heads=3, n_train=1, n_dev=1)
        counts += 1 - methods.create("random").prune(model, ctx).mask
    assert counts.sum() == 1800
    assert counts.min() > 110 and counts.max() < 190  # about 4.6 binomial SDs around 150


def test_random_floor_and_per_layer_targets():
    model, ctx = _context(target=9)
    m = methods.create("random", min_heads_per_layer=1).prune(model, ctx).mask
    assert (m.sum(dim=1) >= 1).all() and int((m == 0).sum()) == 9
    ctx.target_per_layer = [3, 0, 2]
    m = methods.create("random").prune(model, ctx).mask
    assert (m == 0).sum(dim=1).tolist() == [3, 0, 2]
    with pytest.raises(ValueError, match="cannot prune 10 heads"):
        ctx.target_per_layer = None
        ctx.target_heads = 10
        methods.create("random", min_heads_per_layer=1).prune(model, ctx)


# --------------------------------------------------------------------------- confidence


def test_head_confidence_known_values():
    # one layer, one example, two heads, 3 tokens of which the last is padding
    attn = torch.zeros(1, 1, 2, 3, 3)
    attn[0, 0, 0] = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    attn[0, 0, 1] = torch.tensor([[0.2, 0.8, 0.0], [0.6, 0.4, 0.0], [1.0, 0.0, 0.0]])
    att_mask = torch.tensor([[1, 1, 0]])
    summed, n = head_confidence(attn, att_mask, att_mask.bool())
    assert n == 2  # the padded query row is excluded
    assert torch.allclose(summed / n, torch.tensor([[(0.9 + 0.5) / 2, (0.8 + 0.6) / 2]]))
    keys = torch.tensor([[True, False, False]])  # exclude key 1 (e.g. a [SEP])
    summed, n = head_confidence(attn, att_mask, keys)
    assert torch.allclose(summed / n, torch.tensor([[(0.9 + 0.5) / 2, (0.2 + 0.6) / 2]]))


def test_confidence_prunes_the_least_confident_heads():
    model, ctx = _context(target=4)
    res = methods.create("confidence").prune(model, ctx)
    assert res.scores.shape == (3, 4)
    assert ((res.scores > 0) & (res.scores <= 1)).all()
    pruned = res.scores[res.mask == 0]
    kept = res.scores[res.mask == 1]
    assert pruned.max() <= kept.min()


def test_confidence_restores_attention_implementation():
    model, ctx = _context(target=2)
    before = model.config._attn_implementation
    methods.create("confidence").prune(model, ctx)
    assert model.config._attn_implementation == before


# --------------------------------------------------------------------------- michel


def _brute_force_importance(model, examples, base_mask=None):
    """E_x |dL(x)/d xi| with one backward per example and an [L, H] gate: the paper's Eq. 2 verbatim."""
    total = torch.zeros(3, 4, dtype=torch.float64)
    for ex in examples:
        batch = collate([ex])
        gate = torch.ones(3, 4, requires_grad=True)
        eff = gate if base_mask is None else gate * base_mask
        with apply_head_mask(model, eff):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = F.cross_entropy(logits, batch["labels"])
        (g,) = torch.autograd.grad(loss, gate)
        total += g.abs().double()
    return total / len(examples)


#: float32 roundings that head_importance (and the brute force) make whatever the model's dtype: the logits are
#: cast to float32 (1), the 2-class softmax cross-entropy gradient is formed in float32 (exp, sum, division,
#: subtraction: 4), and the float32 gate receives its gradient cast to float32 (1); 8 leaves room. They are
#: single roundings, not accumulations, so they count as N = 8 terms in tests/tolerances.py.
MICHEL_FLOAT32_STEPS = 8

DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])


def _importance_tolerance(model, batch, reference) -> float:
    """Rounding tolerance (tests/tolerances.py) for two computations of a gate-gradient importance.

    float32 model: the forward chain, the backward chain and the gate's reduction over the batch, tokens and
    head size (``bert_gate_gradient_terms``) in float32. float64 model: the same chain in float64 plus the
    handful of float32 roundings head_importance makes itself (:data:`MICHEL_FLOAT32_STEPS`): the float64 run is
    exact up to those. Scale: the largest importance value compared."""
    batch_size, tokens = batch["input_ids"].shape
    terms = bert_gate_gradient_terms(model.config, tokens, batch_size)
    if next(model.parameters()).dtype == torch.float32:
        return rounding_tolerance(reference, terms, torch.float32)
    return (rounding_tolerance(reference, terms, torch.float64)
            + rounding_tolerance(reference, MICHEL_FLOAT32_STEPS, torch.float32))


@DTYPES
def test_michel_per_example_estimator_equals_brute_force(dtype):
    """Per-example gate gradients of one batched backward == one backward per example (exact mathematically).
    Importances up to 4.9e-5: tolerance ~3e-9 (float32 model; measured difference 2.0e-12) and ~1.3e-10
    (float64 model, floored by head_importance's own float32 steps; measured 1.4e-12). The former
    ``atol=1e-6, rtol=1e-4`` was 2% of the largest value."""
    model = tiny_model().to(dtype)
    examples = synthetic_split(10, seed=3)
    fast, n = head_importance(model, [collate(examples[:6]), collate(examples[6:])], 3, 4)
    assert n == 10
    slow = _brute_force_importance(model, examples)
    assert_within(fast, slow, _importance_tolerance(model, collate(examples), slow), "batched vs one by one")
    # and it differs from |gradient of the batch loss| (the DSP-repo estimator), which it must not be
    gate = torch.ones(3, 4, requires_grad=True)
    batch = collate(examples)
    with apply_head_mask(model, gate):
        loss = F.cross_entropy(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits,
                               batch["labels"], reduction="sum")
    (g,) = torch.autograd.grad(loss, gate)
    assert (g.abs().double() / 10 <= fast + 1e-9).all()  # slack >= 33% of each value here: rounding cannot matter
    assert not torch.allclose(g.abs().double() / 10, fast)


@DTYPES
def test_michel_with_base_mask_equals_brute_force(dtype):
    model = tiny_model().to(dtype)
    examples = synthetic_split(6, seed=4)
    base = torch.ones(3, 4)
    base[1, 2] = 0
    fast, _ = head_importance(model, [collate(examples)], 3, 4, base_mask=base)
    slow = _brute_force_importance(model, examples, base)
    assert_within(fast, slow, _importance_tolerance(model, collate(examples), slow), "batched vs one by one")


@DTYPES
def test_michel_token_estimator_normalisation(dtype):
    """Per-token |grad| summed: >= per-example estimator before normalisation (triangle inequality).

    Where all of a head's per-token gradients share a sign the two sides are equal mathematically, and rounding
    may put either one ahead (measured: by 9e-12 in float32, 5e-13 in float64), so the inequality is checked up
    to the rounding tolerance (tests/tolerances.py). In the last layer only [CLS] gets a gradient: both
    estimators are the same sum, up to rounding."""
    model = tiny_model().to(dtype)
    examples = synthetic_split(8, seed=5)
    batch = collate(examples)
    tok, _ = head_importance(model, [batch], 3, 4, estimator="token")
    ex, _ = head_importance(model, [batch], 3, 4, estimator="example")
    n_tokens = int(batch["attention_mask"].sum())
    # undo the normalisations: token sums over all tokens >= per-example |sum over tokens|
    token_sums, example_sums = tok[:-1] * n_tokens, ex[:-1] * 8
    tol = _importance_tolerance(model, batch, torch.maximum(token_sums, example_sums))
    assert (token_sums + tol >= example_sums).all(), (example_sums - token_sums).max()
    # last layer: only [CLS] gets a gradient, so both estimators agree there
    assert_within(tok[-1], ex[-1], _importance_tolerance(model, batch, ex[-1]), "last layer, token vs example")


def test_michel_does_not_touch_weights_and_layer_normalisation():
    model, ctx = _context(target=5)
    before = [p.detach().clone() for p in model.parameters()]
    res = methods.create("michel").prune(model, ctx)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.requires_grad for p in model.parameters())
    assert res.scores.dtype == torch.float64  # the values the mask ranked, so mask_at ranks them again exactly
    assert torch.allclose(res.scores.pow(2).sum(dim=1), torch.ones(3, dtype=torch.float64))  # unit L2 per layer
    assert torch.allclose(normalize_by_layer(torch.tensor([[3.0, 4.0]])), torch.tensor([[0.6, 0.8]]))


def test_michel_iterative_steps():
    model, ctx = _context(target=7)
    res = methods.create("michel", mode="iterative", step_fraction=0.25).prune(model, ctx)
    assert res.heads_pruned == 7
    assert res.trace["steps"] == [3, 6, 7]  # ceil(0.25 * 12) = 3 heads per step


@pytest.mark.parametrize("name, options, target, message", [
    ("random", {}, None, "needs a budget"),
    ("confidence", {}, None, "needs a budget"),
    ("michel", {}, None, "needs a budget"),
    ("michel", {"estimator": "batch"}, 3, "estimator must be one of"),
    ("michel", {"mode": "twice"}, 3, "mode must be one of"),
], ids=["random-no-budget", "confidence-no-budget", "michel-no-budget", "michel-estimator", "michel-mode"])
def test_methods_refuse_a_missing_budget_and_bad_options_when_they_prune(name, options, target, message):
    model, ctx = _context(target=target)
    with pytest.raises(ValueError, match=message):
        methods.create(name, **options).prune(model, ctx)


def test_third_party_method_registers_through_an_entry_point(tmp_path, monkeypatch):
    import importlib.metadata
    import sys

    from headprune_bench.methods import registry

    (tmp_path / "thirdparty_pruner.py").write_text(
        "import torch\n"
        "from headprune_bench.methods import HeadPruner, PruningResult\n"
        "class FirstHeads(HeadPruner):\n"
        "    name = 'test-first-heads'\n"
        "    summary = 'third-party example'\n"
        "    def prune(self, model, context):\n"
        "        mask = torch.ones(context.num_layers, context.num_heads)\n"
        "        mask.view(-1)[: context.target_heads] = 0\n"
        "        return PruningResult(mask=mask)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint(name="test-first-heads", value="thirdparty_pruner:FirstHeads",
                                       group=registry.ENTRY_POINT_GROUP)
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [ep] if group == registry.ENTRY_POINT_GROUP else real(group=group))
    monkeypatch.setattr(registry.METHODS, "discovered", False)
    monkeypatch.setattr(registry.METHODS, "entries", dict(registry.METHODS.entries))
    assert "test-first-heads" in methods.available_methods()
    assert registry.method_source("test-first-heads") == "entry point thirdparty_pruner:FirstHeads"
    check_pruner("test-first-heads", target_heads=2)
    sys.modules.pop("thirdparty_pruner", None)


def test_docs_adding_a_method_example_runs():
    """docs/extending.md's 'Adding a method' example is real code: it registers and passes the conformance check."""
    import re

    from repo_paths import REPO_ROOT

    readme = (REPO_ROOT / "docs" / "extending.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "# methods/magnitude.py" in b)
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(block, "docs/extending.md", "exec"), namespace)
    result = check_pruner("value-norm", target_heads=5)
    assert result.scores is not None and result.scores.shape == (3, 4)


def test_docs_adding_a_method_example_passes_the_linter_as_methods_magnitude_py():
    """Issue 64, item 1: the example copied verbatim to methods/magnitude.py passes `ruff check` (CI runs it)."""
    import re
    import shutil
    import subprocess

    from repo_paths import REPO_ROOT

    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (the dev extra brings it)")
    readme = (REPO_ROOT / "docs" / "extending.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "# methods/magnitude.py" in b)
    done = subprocess.run([ruff, "check", "--stdin-filename", "methods/magnitude.py", "-"], input=block, text=True,
                          capture_output=True, cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_layer_floor_moves_heads_keeps_the_count_and_equals_a_floored_ranking():
    """apply_layer_floor: every layer keeps the floor, the count is kept, and for a method that prunes the lowest
    scores it equals lowest_k_mask with min_heads_per_layer (the same greedy ranking)."""
    from headprune_bench.methods.base import apply_layer_floor

    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        scores = torch.rand(4, 5, generator=gen)
        for k in range(17):
            for floor in range(4):
                if k > 4 * (5 - floor):
                    continue
                moved, moves = apply_layer_floor(lowest_k_mask(scores, k), scores, floor)
                assert torch.equal(moved, lowest_k_mask(scores, k, floor))
                assert int((moved == 0).sum()) == k and bool((moved.sum(dim=1) >= floor).all())
                assert len(moves["restored"]) == len(moves["pruned_instead"])
    # a known case: layer 0 emptied; scores decide which heads come back and which go instead
    mask = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    scores = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.2, 0.8]])
    moved, moves = apply_layer_floor(mask, scores, 1)
    assert moved.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]
    assert moves == {"restored": [[0, 1]], "pruned_instead": [[1, 1]]}
    # no scores: ties by flat index (the lowest index is pruned first and restored last)
    assert apply_layer_floor(mask, None, 1)[0].tolist() == [[0.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
    assert apply_layer_floor(mask, scores, 0)[1] == {"restored": [], "pruned_instead": []}
    with pytest.raises(ValueError, match="cannot keep 2 head"):
        apply_layer_floor(torch.zeros(2, 3), None, 2)
